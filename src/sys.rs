//! The few libc functions std does not wrap. std already links libc, so a small
//! `extern "C"` block is all it takes; nothing else in the crate is `unsafe`.

use std::ffi::{c_char, c_int};

extern "C" {
    fn kill(pid: c_int, sig: c_int) -> c_int;
    fn gethostname(name: *mut c_char, len: usize) -> c_int;
    fn getrlimit(resource: c_int, rlim: *mut RLimit) -> c_int;
    fn sysconf(name: c_int) -> std::ffi::c_long;
    fn setrlimit(resource: c_int, rlim: *const RLimit) -> c_int;
    #[cfg(target_os = "linux")]
    fn send(fd: c_int, buf: *const std::ffi::c_void, len: usize, flags: c_int) -> isize;
    fn pthread_atfork(
        prepare: Option<extern "C" fn()>,
        parent: Option<extern "C" fn()>,
        child: Option<extern "C" fn()>,
    ) -> c_int;
}

/// Forks this process has gone through, counted in each child (`pthread_atfork`).
static FORKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn count_fork_in_child() {
    FORKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// How many times the process was forked on the way to this one, counting from the
/// first call (which starts the count): a value that differs from one taken earlier
/// means this is a child of the process that took it. One relaxed load.
pub fn fork_generation() -> u64 {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: registers a handler that only increments an atomic (async-signal-safe).
        let rc = unsafe { pthread_atfork(None, None, Some(count_fork_in_child)) };
        if rc != 0 {
            log::warn!("pthread_atfork failed ({rc}): a client used after fork() is not detected");
        }
    });
    FORKS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Writes what the kernel takes at once from `buf` to `sock` without blocking, even
/// when the socket is in blocking mode (`MSG_DONTWAIT`), and without SIGPIPE. A full
/// send buffer is `Ok(0)`.
#[cfg(target_os = "linux")]
pub fn send_nonblocking(sock: &std::net::TcpStream, buf: &[u8]) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    const MSG_DONTWAIT: c_int = 0x40;
    const MSG_NOSIGNAL: c_int = 0x4000;
    loop {
        // SAFETY: the buffer is valid for `buf.len()` bytes and the fd is open for
        // as long as `sock` is borrowed.
        let rc =
            unsafe { send(sock.as_raw_fd(), buf.as_ptr().cast(), buf.len(), MSG_DONTWAIT | MSG_NOSIGNAL) };
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            std::io::ErrorKind::Interrupted => continue,
            std::io::ErrorKind::WouldBlock => return Ok(0),
            _ => return Err(e),
        }
    }
}

/// Elsewhere: never writes, so every answer takes the writer thread's path.
#[cfg(not(target_os = "linux"))]
pub fn send_nonblocking(_sock: &std::net::TcpStream, _buf: &[u8]) -> std::io::Result<usize> {
    Ok(0)
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

#[repr(C)]
struct RLimit {
    cur: u64,
    max: u64,
}

#[cfg(target_os = "linux")]
const RLIMIT_NOFILE: c_int = 7;
#[cfg(not(target_os = "linux"))]
const RLIMIT_NOFILE: c_int = 8;

/// Raises the soft limit on open files to the hard limit (as servers do: the soft
/// limit's usual 1024 is a default for interactive programs, not a policy) and returns
/// the soft limit in force afterwards.
pub fn raise_open_files_limit() -> u64 {
    let mut limit = RLimit { cur: 0, max: 0 };
    // SAFETY: `limit` is a valid, writable rlimit struct.
    if unsafe { getrlimit(RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    if limit.cur < limit.max {
        let raised = RLimit { cur: limit.max, max: limit.max };
        // SAFETY: `raised` is a valid rlimit struct; failure leaves the limit as it was.
        if unsafe { setrlimit(RLIMIT_NOFILE, &raised) } == 0 {
            return raised.cur;
        }
    }
    limit.cur
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), the unit of /proc's CPU times.
pub fn clock_ticks_per_second() -> u64 {
    #[cfg(target_os = "linux")]
    const SC_CLK_TCK: c_int = 2;
    #[cfg(not(target_os = "linux"))]
    const SC_CLK_TCK: c_int = 3;
    // SAFETY: sysconf reads a system constant and has no preconditions.
    let ticks = unsafe { sysconf(SC_CLK_TCK) };
    if ticks > 0 {
        ticks as u64
    } else {
        100
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
