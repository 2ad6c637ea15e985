//! The few libc functions std does not wrap, through the `libc` crate (whose constants
//! are right for each target); the only `unsafe` outside the C ABI (src/capi/).

use libc::c_int;

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
        let rc = unsafe { libc::pthread_atfork(None, None, Some(count_fork_in_child)) };
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
    loop {
        // SAFETY: the buffer is valid for `buf.len()` bytes and the fd is open for
        // as long as `sock` is borrowed.
        let rc = unsafe {
            libc::send(
                sock.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
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
pub const SIGTERM: i32 = libc::SIGTERM;

/// Sends `signal` to process `pid`.
pub fn send_signal(pid: u32, signal: i32) -> std::io::Result<()> {
    let pid = c_int::try_from(pid)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: kill has no memory-safety preconditions; a positive pid names one process.
    let rc = unsafe { libc::kill(pid, signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Raises the soft limit on open files to the hard limit (as servers do: the soft
/// limit's usual 1024 is a default for interactive programs, not a policy) and returns
/// the soft limit in force afterwards.
#[allow(clippy::unnecessary_cast)] // rlim_t is 32 bits wide on some targets
pub fn raise_open_files_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a valid, writable rlimit struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
        // SAFETY: `raised` is a valid rlimit struct; failure leaves the limit as it was.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return raised.rlim_cur as u64;
        }
    }
    limit.rlim_cur as u64
}

/// Asks Linux (6.16 and later, `prctl(PR_FUTEX_HASH)`) for a private futex hash of
/// `slots` buckets (a power of two) and returns the buckets in use after, or `None` where
/// the kernel has no such call. Why: the default private hash has 16 buckets on a
/// 2-CPU machine, and with thousands of threads blocked each wake-up walks a chain of
/// hundreds (`ticketing bench` with 10,000 waiters spent 40 % of its CPU in
/// `futex_wake`, docs/benchmarks.md).
#[cfg(target_os = "linux")]
pub fn futex_hash_slots(slots: u32) -> Option<u32> {
    const PR_FUTEX_HASH: libc::c_int = 78;
    const PR_FUTEX_HASH_SET_SLOTS: libc::c_ulong = 1;
    const PR_FUTEX_HASH_GET_SLOTS: libc::c_ulong = 2;
    // SAFETY: prctl with integer arguments only; an unknown option fails with EINVAL.
    unsafe {
        libc::prctl(
            PR_FUTEX_HASH,
            PR_FUTEX_HASH_SET_SLOTS,
            slots as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        );
        let now = libc::prctl(
            PR_FUTEX_HASH,
            PR_FUTEX_HASH_GET_SLOTS,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        );
        u32::try_from(now).ok()
    }
}

/// Elsewhere there is no such call.
#[cfg(not(target_os = "linux"))]
pub fn futex_hash_slots(_slots: u32) -> Option<u32> {
    None
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), the unit of /proc's CPU times.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a system constant and has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
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
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
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
