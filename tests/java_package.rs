//! The Java library (java/, docs/java.md) against real servers: its JUnit suite through
//! Maven (grant, FIFO, busy and timeout, release outcomes, try-with-resources on an
//! exception, 64 threads on one client, a cancelled written acquire, an interrupted
//! wait, bad arguments, a wrong secret, `clusterName` against servers named `blue` and
//! unnamed, a paused server's indeterminate acquire and its
//! resolve, async stages off the client's threads also when the executor rejects them),
//! that no extracted library is left in the temporary directory, its virtual-thread
//! test on a Java 21 or newer with one carrier thread, and the README's Java example as
//! a consumer project of its own that depends on the artifact `mvn install` put in the
//! local repository, run as written against a node; and the JDBC examples against a
//! throw-away PostgreSQL: fencing (java/examples/fenced-postgres) and the ticket sale of
//! counted and multi-key holds (java/examples/ticket-sale).
//!
//! Maven builds around this cargo run's libticketing.so (no cargo inside:
//! tests/common/java.rs) and the tests start this run's `ticketing` binary
//! (TICKETING_BIN). Without Maven and a JDK the tests print `SKIPPED` and pass, unless
//! `TICKETING_REQUIRE_JAVA=1` (set by `.ci/run`) makes that a failure.

mod common;

#[path = "../examples/fenced_postgres.rs"]
#[allow(dead_code)]
mod fenced_postgres;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::bindings::{postgres_or_skip, run_in_group};
use common::java::{have_java, maven_lock, mvn, native_args, project};
use common::{bin, repo, start_server, TOKEN};

/// `program args…` in `dir`, without a TICKETING_LIBRARY from the caller's environment
/// (the jar loads the library it carries; see [`run_in_group`]). Returns (success, output).
fn run(
    program: &str,
    args: &[String],
    dir: &Path,
    env: &[(&str, String)],
    limit: Duration,
) -> (bool, String) {
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(dir).env_remove("TICKETING_LIBRARY").envs(env.iter().map(|(k, v)| (k, v)));
    run_in_group(&mut cmd, limit)
}

/// One test of this file at a time: the suite's timings (an interrupt answered within
/// 1.2 s) are not measured beside a Maven compile of another test.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn args(list: &[&str]) -> Vec<String> {
    native_args().into_iter().chain(list.iter().map(|s| s.to_string())).collect()
}

/// A JDK of Java 21 or newer for the virtual-thread test: `$JAVA21_HOME`, else the newest
/// under /usr/lib/jvm whose `release` file says 21 or more.
fn java21() -> Option<PathBuf> {
    if let Ok(home) = std::env::var("JAVA21_HOME") {
        return Some(PathBuf::from(home).join("bin/java"));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/jvm")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let release = std::fs::read_to_string(e.path().join("release")).ok()?;
            let line = release.lines().find(|l| l.starts_with("JAVA_VERSION="))?;
            let major: u32 =
                line.trim_start_matches("JAVA_VERSION=").trim_matches('"').split('.').next()?.parse().ok()?;
            let java = e.path().join("bin/java");
            (major >= 21 && java.is_file()).then_some((major, java))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, java)| java)
}

#[test]
fn the_java_suite_passes_against_real_servers() {
    if !have_java("the_java_suite_passes_against_real_servers") {
        return;
    }
    let _serial = serial();
    let env = [("TICKETING_BIN", bin().to_string())];
    let _guard = maven_lock();
    let (ok, output) = run(&mvn(), &args(&["test"]), &project(), &env, Duration::from_secs(600));
    assert!(ok && output.contains("BUILD SUCCESS"), "mvn test in java/ failed:\n{output}");
    let summary: Vec<&str> = output.lines().filter(|l| l.contains("Tests run:")).collect();
    eprintln!("{}", summary.join("\n"));
    assert!(output.contains("Failures: 0, Errors: 0"), "{output}");

    let Some(java) = java21() else {
        eprintln!("SKIPPED the virtual-thread test: no Java 21 or newer (JAVA21_HOME, /usr/lib/jvm)");
        return;
    };
    let vt = args(&[
        "test",
        "-Dtest=VirtualThreadsTest",
        &format!("-Djvm={}", java.display()),
        "-DargLine=-Djdk.virtualThreadScheduler.parallelism=1 -Djdk.virtualThreadScheduler.maxPoolSize=1 \
         --enable-native-access=ALL-UNNAMED",
    ]);
    let (ok, output) = run(&mvn(), &vt, &project(), &env, Duration::from_secs(300));
    assert!(ok, "the virtual-thread test under {} failed:\n{output}", java.display());
    assert!(output.contains("Tests run: 1, Failures: 0, Errors: 0, Skipped: 0"), "{output}");
    for line in output.lines().filter(|l| l.starts_with("virtual threads:") || l.contains("Tests run:")) {
        eprintln!("{line}");
    }
}

/// The pom of a project of its own that depends on the installed artifact.
fn consumer_pom(version: &str, extra_dependencies: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>example</groupId>
  <artifactId>consumer</artifactId>
  <version>1</version>
  <properties>
    <maven.compiler.release>17</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencies>
    <dependency>
      <groupId>dev.ticketing</groupId>
      <artifactId>ticketing</artifactId>
      <version>{version}</version>
    </dependency>{extra_dependencies}
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-compiler-plugin</artifactId>
        <version>3.14.1</version>
      </plugin>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-resources-plugin</artifactId>
        <version>3.5.0</version>
      </plugin>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>3.9.0</version>
      </plugin>
    </plugins>
  </build>
</project>
"#
    )
}

/// The version in java/pom.xml (the one right after the artifactId).
fn artifact_version() -> String {
    let pom = std::fs::read_to_string(project().join("pom.xml")).unwrap();
    let after = &pom[pom.find("<artifactId>ticketing</artifactId>").unwrap()..];
    let start = after.find("<version>").unwrap() + "<version>".len();
    after[start..start + after[start..].find('<').unwrap()].to_string()
}

/// `mvn install` in java/, as docs/java.md says, around this run's library: the
/// artifact goes to the local repository (~/.m2).
fn install() {
    let _guard = maven_lock();
    let (ok, output) =
        run(&mvn(), &args(&["-q", "install", "-DskipTests"]), &project(), &[], Duration::from_secs(600));
    assert!(ok, "mvn install in java/ failed:\n{output}");
}

/// `mvn install`, then a consumer project in `dir` compiled against the local
/// repository's artifact; returns the class path to run it with.
fn install_and_build_consumer(dir: &Path, extra_dependencies: &str) -> String {
    install();
    std::fs::write(dir.join("pom.xml"), consumer_pom(&artifact_version(), extra_dependencies)).unwrap();
    let build = [
        "-B",
        "-q",
        "compile",
        "dependency:build-classpath",
        "-Dmdep.outputFile=classpath.txt",
        "-Dmdep.includeScope=runtime",
    ]
    .map(String::from);
    let (ok, output) = run(&mvn(), &build, dir, &[], Duration::from_secs(600));
    assert!(ok, "building the consumer project failed:\n{output}");
    let deps = std::fs::read_to_string(dir.join("classpath.txt")).unwrap();
    assert!(deps.contains("ticketing-"), "the consumer's class path lacks the artifact: {deps}");
    format!("{}:{}", dir.join("target/classes").display(), deps.trim())
}

/// The README's ```java block as Example.java of a consumer project that depends on the
/// installed artifact (whose jar carries libticketing.so: TICKETING_LIBRARY is unset),
/// run as written against a standalone node: its address (127.0.0.1:5225) is the
/// node's, TICKETING_AUTH_TOKEN its secret.
#[test]
fn the_readme_java_example_runs_from_the_installed_artifact() {
    if !have_java("the_readme_java_example_runs_from_the_installed_artifact") {
        return;
    }
    let _serial = serial();
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let start = readme.find("```java\n").expect("a ```java block in README.md") + 8;
    let example = &readme[start..start + readme[start..].find("```").unwrap()];
    assert!(example.contains("127.0.0.1:5225"), "the example talks to the node the CLI section starts");
    let server = start_server(&[]);
    let dir = tempfile::tempdir().unwrap();
    let sources = dir.path().join("src/main/java");
    std::fs::create_dir_all(&sources).unwrap();
    std::fs::write(sources.join("Example.java"), example.replace("127.0.0.1:5225", &server.addr.to_string()))
        .unwrap();
    let classpath = install_and_build_consumer(dir.path(), "");
    let env = [("TICKETING_AUTH_TOKEN", TOKEN.to_string())];
    let java = ["-cp".to_string(), classpath, "Example".to_string()];
    let (ok, output) = run("java", &java, dir.path(), &env, Duration::from_secs(60));
    assert!(ok, "README's Java example failed:\n{output}");
    for expected in ["selling seat 42 under fencing token", "held by box-office-7", "RELEASED"] {
        assert!(output.contains(expected), "no {expected:?} in:\n{output}");
    }
    eprintln!("{output}");
}

/// Runs the Maven project `example` (under java/examples; its own project with the
/// PostgreSQL JDBC driver) against a real server and a throw-away PostgreSQL, and gives
/// its output once it succeeded; `None` (SKIPPED) without Java or PostgreSQL.
fn postgres_example(test: &str, example: &str) -> Option<String> {
    if !have_java(test) {
        return None;
    }
    let _serial = serial();
    if !postgres_or_skip(test, fenced_postgres::postgres_bin_dir().is_some()) {
        return None;
    }
    let server = start_server(&[]);
    // Again on another port when its port was taken (PostgreSQL logs "Address already
    // in use" and exits).
    let (port, pg) = common::with_fresh_ports("a throw-away PostgreSQL", || {
        let port = common::free_port();
        let pg = fenced_postgres::Postgres::start_with_tcp(port).map_err(|e| e.to_string())?;
        Ok((port, pg))
    });
    let dir = project().join("examples").join(example);
    install();
    let env = [
        ("TICKETING_ADDRS", server.addr.to_string()),
        ("TICKETING_AUTH_TOKEN", TOKEN.to_string()),
        ("FENCE_JDBC", format!("jdbc:postgresql://127.0.0.1:{port}/postgres?user=fence")),
    ];
    let run_args = ["-B", "-q", "compile", "exec:exec"].map(String::from);
    let (ok, output) = run(&mvn(), &run_args, &dir, &env, Duration::from_secs(300));
    assert!(ok, "the Java example {example} failed:\n{output}\nPostgreSQL:\n{}", pg.log());
    eprintln!("{output}");
    Some(output)
}

/// java/examples/fenced-postgres (docs/java.md, "Fencing with the token"): A's late
/// write is rejected, sold once to B.
#[test]
fn the_java_fencing_example_sells_once_against_postgres() {
    let test = "the_java_fencing_example_sells_once_against_postgres";
    let Some(output) = postgres_example(test, "fenced-postgres") else { return };
    for expected in ["sells with token", ": rejected", "release: not_holder", "sold once, to B"] {
        assert!(output.contains(expected), "no {expected:?} in:\n{output}");
    }
}

/// java/examples/ticket-sale (docs/java.md, "Example: a ticket sale"): 2 of 100 tickets
/// per buyer through a counted key, never oversold, and families' 4 adjacent seats in
/// one hold, no seat sold twice.
#[test]
fn the_java_ticket_sale_example_never_oversells_against_postgres() {
    let test = "the_java_ticket_sale_example_never_oversells_against_postgres";
    let Some(output) = postgres_example(test, "ticket-sale") else { return };
    for expected in [
        "50 bought, 10 sold out; 100 tickets ordered, 0 left",
        "family-c: seats [207, 208, 209, 210]",
        "nothing oversold, no seat sold twice",
    ] {
        assert!(output.contains(expected), "no {expected:?} in:\n{output}");
    }
}
