//! The Java library (java/, docs/java.md) for the tests that use it: Maven and a JDK,
//! and the library's jar built around this run's native library (Maven runs no cargo
//! then: `ticketing.cargo.skip`, `ticketing.native.dir`).

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use super::bindings::{have_or_skip, native_lib_dir};
use super::repo;

/// Maven (`$MVN`, else `mvn` on the PATH).
pub fn mvn() -> String {
    std::env::var("MVN").unwrap_or_else(|_| "mvn".into())
}

/// How a fresh Debian machine gets what the Java tests need.
pub const INSTALL: &str = "apt-get install maven openjdk-17-jdk-headless";

/// True when Maven and a JDK run; else `SKIPPED` (or a failure under
/// TICKETING_REQUIRE_JAVA=1).
pub fn have_java(test: &str) -> bool {
    have_or_skip(test, &mvn(), &["-v"], "TICKETING_REQUIRE_JAVA", INSTALL)
        && have_or_skip(test, "javac", &["-version"], "TICKETING_REQUIRE_JAVA", INSTALL)
}

/// The project's directory.
pub fn project() -> PathBuf {
    repo().join("java")
}

/// Maven's arguments for a build around this run's libticketing.so, without cargo.
pub fn native_args() -> Vec<String> {
    vec![
        "-B".into(),
        "-Dticketing.cargo.skip=true".into(),
        format!("-Dticketing.native.dir={}", native_lib_dir().display()),
    ]
}

/// One Maven run at a time in java/ (they share java/target).
pub fn maven_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The library's jar and its runtime dependencies (JNA) as a class path, built once.
pub fn classpath() -> String {
    static CP: OnceLock<String> = OnceLock::new();
    CP.get_or_init(|| {
        let _guard = maven_lock();
        let mut cmd = Command::new(mvn());
        cmd.args(native_args()).args(["-q", "package", "-DskipTests"]).current_dir(project());
        let out = super::run_within(&mut cmd, super::children::BUILD, "mvn package in java/");
        assert!(
            out.status.success(),
            "mvn package in java/ failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let target = project().join("target");
        let jar = std::fs::read_dir(&target)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                name.starts_with("ticketing-") && name.ends_with(".jar")
            })
            .expect("java/target/ticketing-*.jar");
        let deps = std::fs::read_to_string(target.join("runtime-classpath.txt")).unwrap();
        format!("{}:{}", jar.display(), deps.trim())
    })
    .clone()
}
