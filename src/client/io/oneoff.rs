//! One request on a fresh connection of its own, closed afterwards: for a node the
//! client does not dial (`status_of` another address) and for the admin operations,
//! which ask one node at a time and follow `M` themselves.

use std::io::BufReader;
use std::time::{Duration, Instant};

use super::dial::Dialer;
use crate::client::error::ClientError;
use crate::proto::frame::{decode_response, encode_request, Request, Response};
use crate::proto::io::{FrameReader, ReadDeadline};
use crate::proto::limits::RESPONSE_FRAME_LEN_MAX;

/// The request id of the one request.
const ONE_OFF_ID: u32 = 1;

/// Dials `addr` (at most 3 s per address to connect and 5 s for the handshake), sends
/// `request` and waits for its answer, all within `timeout`. `Err(Unavailable)` when no
/// connection could be made (nothing was sent; its cause inside), `Err(NoAnswer)` when no answer came.
pub(crate) fn exchange(
    dialer: &Dialer,
    addr: &str,
    request: &Request,
    timeout: Duration,
) -> Result<Response, ClientError> {
    let deadline = Instant::now() + timeout;
    let dialed = dialer.dial_within(addr, |_| {}, Some(timeout)).map_err(|e| {
        log::debug!("one-off connection: {}", e.cause);
        ClientError::Unavailable { last_error: Some(e.cause), lasting: e.lasting }
    })?;
    let mut writer = dialed.writer;
    let mut frame = Vec::with_capacity(64);
    encode_request(&mut frame, ONE_OFF_ID, request);
    if writer.write_counted(&frame, deadline).is_err() {
        writer.shutdown();
        return Err(ClientError::NoAnswer);
    }
    let mut frames = FrameReader::new(BufReader::new(dialed.reader), RESPONSE_FRAME_LEN_MAX);
    let answer = loop {
        if frames.get_mut().set_read_deadline(Some(deadline)).is_err() {
            break Err(ClientError::NoAnswer);
        }
        match frames.read_payload().map(decode_response) {
            Ok(Ok((ONE_OFF_ID, response))) => break Ok(response),
            Ok(Ok((0, response))) => {
                break Err(ClientError::Protocol(format!("the server closed the connection: {response:?}")))
            }
            Ok(Ok(_)) => continue,
            Ok(Err(e)) => break Err(ClientError::Protocol(format!("bad frame: {e}"))),
            Err(_) => break Err(ClientError::NoAnswer),
        }
    };
    writer.shutdown();
    answer
}
