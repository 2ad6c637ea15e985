//! The few libc functions std does not wrap. std already links libc, so a small
//! `extern "C"` block is all it takes; nothing else in the crate is `unsafe`.

use std::ffi::{c_char, c_int};

extern "C" {
    fn kill(pid: c_int, sig: c_int) -> c_int;
    fn gethostname(name: *mut c_char, len: usize) -> c_int;
}

/// Polite termination request.
pub const SIGTERM: i32 = 15;

/// Sends `signal` to process `pid`.
pub fn send_signal(pid: u32, signal: i32) -> std::io::Result<()> {
    let pid = c_int::try_from(pid)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: kill has no memory-safety preconditions; a positive pid names one process.
    let rc = unsafe { kill(pid, signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// This machine's host name, if it has a readable one.
pub fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for `buf.len()` bytes; gethostname writes at most that.
    let rc = unsafe { gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = std::str::from_utf8(&buf[..end]).ok()?.trim();
    if name.is_empty() {
        None
    } else {
        Some(name.to_owned())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hostname_is_readable() {
        assert!(super::hostname().is_some());
    }

    #[test]
    fn signals_reach_a_child() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        super::send_signal(child.id(), super::SIGTERM).unwrap();
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(super::SIGTERM));
    }
}
