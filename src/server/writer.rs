//! A connection's writer thread: writes answers as they come, batching whatever is
//! queued into one write, and settles the connection's figures as they go out
//! (src/server/outbox.rs).

use std::io::Write;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::outbox::{local_answer_bytes, ConnCounters, DirectWriter, NodeBudget, LOCK_ANSWER_BYTES};
use crate::messages::WriterMsg;
use crate::proto::frame::encode_response;
use crate::transport::WriteHalf;

/// A batch of answers not written within this long closes the connection: the client
/// has stopped reading. The deadline covers the whole batch, not each system call.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(30);

/// Writes answers as they come, batching everything already queued into one write.
pub fn write_loop(
    mut writer: WriteHalf,
    rx: Receiver<WriterMsg>,
    counters: &ConnCounters,
    node: &NodeBudget,
    direct: Option<&DirectWriter>,
) {
    write_replies(&mut writer, rx, counters, node, direct);
    counters.writer_stopped();
}

fn write_replies(
    writer: &mut WriteHalf,
    rx: Receiver<WriterMsg>,
    counters: &ConnCounters,
    node: &NodeBudget,
    direct: Option<&DirectWriter>,
) {
    let mut buf = Vec::with_capacity(4096);
    let mut closing = false;
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        // Answers in `buf`, settled once they are written.
        let (mut count, mut bytes) = (0, 0);
        while let Some(msg) = next.take() {
            match msg {
                WriterMsg::Reply { id, response, counted } => {
                    if counted {
                        count += 1;
                        bytes += LOCK_ANSWER_BYTES;
                    } else {
                        bytes += local_answer_bytes(&response);
                    }
                    encode_response(&mut buf, id, &response);
                }
                WriterMsg::Encoded { bytes: encoded, count: n } => {
                    buf.extend_from_slice(&encoded);
                    count += n;
                    bytes += n * LOCK_ANSWER_BYTES;
                }
                WriterMsg::Flush => {}
                WriterMsg::Close => closing = true,
            }
            if buf.len() >= 64 * 1024 {
                break;
            }
            next = rx.try_recv().ok();
        }
        // One deadline for the whole batch (and the spill before it).
        if writer.set_write_deadline(Some(Instant::now() + WRITE_DEADLINE)).is_err() {
            break;
        }
        // The write token: the lock-table thread writes only while it is free.
        let mut spill = direct.map(DirectWriter::write_token);
        if let Some(spill) = spill.as_mut() {
            if !spill.is_empty() {
                let ok = writer.write_all(spill).is_ok();
                spill.clear();
                if !ok {
                    counters.answered(node, count, bytes);
                    break;
                }
            }
        }
        let ok = buf.is_empty() || writer.write_all(&buf).and_then(|_| writer.flush()).is_ok();
        buf.clear();
        if buf.capacity() > 256 * 1024 {
            buf = Vec::with_capacity(4096);
        }
        counters.answered(node, count, bytes);
        drop(spill);
        if !ok {
            break;
        }
        if closing {
            writer.close_gracefully();
            return;
        }
    }
    writer.shutdown();
}
