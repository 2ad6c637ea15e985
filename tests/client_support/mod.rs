//! A fake Ticketing server for the client tests: it speaks the real handshake and
//! frames (from `ticketing::proto`) and answers each request with whatever the test's
//! handler decides, which is how faults are injected.
#![allow(dead_code)]

use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ticketing::client::Client;
use ticketing::proto::frame::{decode_request, encode_response, Request, Response};
use ticketing::proto::handshake::{auth_key, server_handshake, Welcome, CLIENT_LABELS};
use ticketing::proto::io::FrameReader;
use ticketing::proto::limits::REQUEST_FRAME_LEN_MAX;

pub const TOKEN: &str = "fake-server-secret-0123456789";

/// What the fake does with one request.
pub enum Action {
    Reply(Response),
    /// Answer from another thread after a pause (later requests are not held back).
    ReplyAfter(Duration, Response),
    /// Never answer.
    Ignore,
    /// Close the connection without answering.
    Close,
}

pub type Handler = Box<dyn Fn(usize, u32, &Request) -> Action + Send + Sync>;

pub struct FakeServer {
    pub addr: SocketAddr,
    pub state: Arc<State>,
}

pub struct State {
    handler: Handler,
    role: u8,
    leader: Mutex<String>,
    /// Handshakes completed, in order.
    pub handshakes: AtomicUsize,
    /// When each TCP connection was accepted.
    pub accepts: Mutex<Vec<Instant>>,
    /// Every request received: (connection number, id, request).
    pub received: Mutex<Vec<(usize, u32, Request)>>,
    /// Close new connections right after accepting them (before HELLO).
    pub refuse: AtomicBool,
    open: Mutex<Vec<(usize, TcpStream)>>,
    stopped: AtomicBool,
}

impl FakeServer {
    /// A fake that welcomes as `role` (b'S', b'L', b'F') and answers with `handler`.
    pub fn start(role: u8, handler: Handler) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            handler,
            role,
            leader: Mutex::new(String::new()),
            handshakes: AtomicUsize::new(0),
            accepts: Mutex::new(Vec::new()),
            received: Mutex::new(Vec::new()),
            refuse: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
        });
        let accept_state = Arc::clone(&state);
        std::thread::spawn(move || {
            let mut number = 0;
            for stream in listener.incoming() {
                if accept_state.stopped.load(Ordering::Acquire) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                accept_state.accepts.lock().unwrap().push(Instant::now());
                if accept_state.refuse.load(Ordering::Acquire) {
                    drop(stream);
                    continue;
                }
                number += 1;
                let state = Arc::clone(&accept_state);
                std::thread::spawn(move || serve(state, number, stream));
            }
        });
        FakeServer { addr, state }
    }

    /// A standalone fake with a simple, correct enough lock table: every ACQUIRE is
    /// granted with a fresh token, RELEASE says R, QUERY says F.
    pub fn granting() -> FakeServer {
        FakeServer::granting_as(b'S')
    }

    /// Like [`FakeServer::granting`], welcoming with `role`.
    pub fn granting_as(role: u8) -> FakeServer {
        let next = Arc::new(AtomicUsize::new(100));
        FakeServer::start(
            role,
            Box::new(move |_, _, request| match request {
                Request::Acquire { lease_s, .. } => Action::Reply(Response::Granted {
                    token: next.fetch_add(1, Ordering::SeqCst) as u64,
                    lease_ms: u32::from(*lease_s) * 1000,
                }),
                other => Action::Reply(default_answer(other)),
            }),
        )
    }

    pub fn addr_string(&self) -> String {
        self.addr.to_string()
    }

    pub fn set_leader(&self, leader: &str) {
        *self.state.leader.lock().unwrap() = leader.to_owned();
    }

    /// A client with the fake's token and a short commit margin.
    pub fn client(&self) -> Client {
        client_for(&[self.addr_string()])
    }

    pub fn handshakes(&self) -> usize {
        self.state.handshakes.load(Ordering::SeqCst)
    }

    pub fn received(&self) -> Vec<(usize, u32, Request)> {
        self.state.received.lock().unwrap().clone()
    }

    pub fn count(&self, pred: impl Fn(&Request) -> bool) -> usize {
        self.received().iter().filter(|(_, _, r)| pred(r)).count()
    }

    /// Cuts the oldest open connection (both directions, no answer to anything on it).
    pub fn cut_one(&self) -> bool {
        let mut open = self.state.open.lock().unwrap();
        if open.is_empty() {
            return false;
        }
        let (_, stream) = open.remove(0);
        let _ = stream.shutdown(Shutdown::Both);
        true
    }

    pub fn cut_all(&self) {
        let mut open = self.state.open.lock().unwrap();
        for (_, stream) in open.drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::Release);
        self.cut_all();
        let _ = TcpStream::connect(self.addr);
    }
}

pub fn client_for(addrs: &[String]) -> Client {
    Client::builder()
        .addrs(addrs.iter().cloned())
        .auth_token(TOKEN)
        .owner("test-owner")
        .commit_margin(Duration::from_millis(300))
        .request_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// What a plausible server answers to a request that the test does not care about.
pub fn default_answer(request: &Request) -> Response {
    match request {
        Request::Acquire { .. } | Request::Hold { .. } => Response::Busy,
        Request::Pool { .. } => Response::Pool {
            capacity: 0,
            in_use: 0,
            holds: 0,
            waiters: 0,
            oldest_wait_ms: 0,
            holders: Vec::new(),
        },
        Request::Release { .. } => Response::Released,
        Request::Query { .. } => Response::Free,
        Request::Status => Response::Status { text: "node_id=1\nrole=standalone\n".into() },
        Request::Ping => Response::Pong,
        Request::Replace { .. } => Response::Status { text: "replaced\n".into() },
        Request::Members => Response::Status { text: "voter=1@127.0.0.1:5225\n".into() },
        Request::TopKeys { .. } => Response::TopKeys { keys: Vec::new() },
        Request::TransferLeader { .. } => Response::Status { text: "leader=1@127.0.0.1:5225\n".into() },
        Request::Join { node, .. } => Response::Status { text: format!("standby={node}\n") },
        Request::Found { .. } => Response::Status { text: "founding=1\n".into() },
    }
}

fn serve(state: Arc<State>, number: usize, mut stream: TcpStream) {
    let key = auth_key(TOKEN.as_bytes());
    let leader = state.leader.lock().unwrap().clone();
    let welcome = Welcome { node_id: 7, role: state.role, domain: 42, leader };
    if server_handshake(&mut stream, &key, &CLIENT_LABELS, || welcome).is_err() {
        return;
    }
    state.open.lock().unwrap().push((number, stream.try_clone().unwrap()));
    state.handshakes.fetch_add(1, Ordering::SeqCst);
    let writer = Arc::new(Mutex::new(stream.try_clone().unwrap()));
    let mut frames = FrameReader::new(stream, REQUEST_FRAME_LEN_MAX);
    while let Ok(payload) = frames.read_payload() {
        let Ok((id, request)) = decode_request(payload) else {
            return;
        };
        state.received.lock().unwrap().push((number, id, request.clone()));
        match (state.handler)(number, id, &request) {
            Action::Reply(response) => send(&writer, id, &response),
            Action::ReplyAfter(pause, response) => {
                let writer = Arc::clone(&writer);
                std::thread::spawn(move || {
                    // sleep: the answer's injected delay.
                    std::thread::sleep(pause);
                    send(&writer, id, &response);
                });
            }
            Action::Ignore => {}
            Action::Close => {
                let _ = frames.get_mut().shutdown(Shutdown::Both);
                return;
            }
        }
    }
}

fn send(writer: &Mutex<TcpStream>, id: u32, response: &Response) {
    let mut out = Vec::new();
    encode_response(&mut out, id, response);
    let _ = writer.lock().unwrap().write_all(&out);
}
