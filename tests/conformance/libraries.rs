//! The libraries under test and how to start each one's driver: the Rust client (this
//! very test binary, run again as a driver), the C ABI (tests/conformance/drivers/
//! driver.c, built here), the Python package blocking and asyncio
//! (tests/conformance/drivers/driver.py), the Go module (tests/conformance/drivers/
//! driver.go, built here), the Java library blocking and async (tests/conformance/
//! drivers/driver.java, compiled here), the Node.js package (tests/conformance/drivers/
//! driver.mjs). Another library plugs in here with its own driver program.

use std::path::PathBuf;
use std::process::Command;

use super::common::bindings::{have_or_skip, native_lib_dir};
use super::common::cc::{build_against_shared, cc_or_skip};
use super::common::children::{Within, BUILD, CLI};
use super::common::{bin, repo};
use super::driver::Launch;

/// The environment variable that makes this binary a driver.
pub const DRIVER_VAR: &str = "TICKETING_CONFORMANCE_DRIVER";

/// A library: its name and how to start its driver, or why it is skipped.
pub struct Library {
    pub name: &'static str,
    pub launch: Launch,
    /// Kept alive while the driver program lives in it.
    _dir: Option<tempfile::TempDir>,
}

fn rust() -> Library {
    let exe = std::env::current_exe().unwrap().to_string_lossy().into_owned();
    Library {
        name: "rust",
        launch: Launch { program: exe, args: Vec::new(), env: vec![(DRIVER_VAR.into(), "1".into())] },
        _dir: None,
    }
}

fn c() -> Option<Library> {
    let cc = cc_or_skip("conformance of the C ABI")?;
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("driver");
    let source = repo().join("tests/conformance/drivers/driver.c");
    build_against_shared(&cc, &source, &program, &["-O2".to_string()]);
    let env = vec![("LD_LIBRARY_PATH".into(), native_lib_dir().to_string_lossy().into_owned())];
    let launch = Launch { program: program.to_string_lossy().into_owned(), args: Vec::new(), env };
    Some(Library { name: "c", launch, _dir: Some(dir) })
}

fn python(aio: bool) -> Option<Library> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let name = if aio { "python-asyncio" } else { "python" };
    if !have_or_skip(
        &format!("conformance of {name}"),
        &python,
        &["-c", "import sys; assert sys.version_info >= (3, 9)"],
        "TICKETING_REQUIRE_PYTHON",
        "apt-get install python3",
    ) {
        return None;
    }
    let driver: PathBuf = repo().join("tests/conformance/drivers/driver.py");
    let mut args = vec!["-u".to_string(), driver.to_string_lossy().into_owned()];
    if aio {
        args.push("--aio".into());
    }
    let env = vec![
        ("PYTHONPATH".into(), repo().join("python").to_string_lossy().into_owned()),
        ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
        ("TICKETING_LIBRARY".into(), native_lib_dir().join("libticketing.so").to_string_lossy().into_owned()),
    ];
    Some(Library { name, launch: Launch { program: python, args, env }, _dir: None })
}

/// The Go module (go/): tests/conformance/drivers/driver.go, built here as a program of
/// its own that uses the module through `replace`, linked to this build's libticketing.a.
fn go() -> Option<Library> {
    let go = std::env::var("GO").unwrap_or_else(|_| "go".into());
    let install = "apt-get install golang-go (Go 1.19 or newer)";
    if !have_or_skip("conformance of go", &go, &["version"], "TICKETING_REQUIRE_GO", install) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let module = "github.com/ticketing-lock/ticketing/go";
    let go_mod = format!(
        "module driver\n\ngo 1.19\n\nrequire {module} v0.0.0\n\nreplace {module} => {}\n",
        repo().join("go").display()
    );
    std::fs::write(dir.path().join("go.mod"), go_mod).unwrap();
    std::fs::copy(repo().join("tests/conformance/drivers/driver.go"), dir.path().join("main.go")).unwrap();
    let program = dir.path().join("driver");
    let built = Command::new(&go)
        .args(["build", "-o"])
        .arg(&program)
        .arg(".")
        .current_dir(dir.path())
        .env("CGO_ENABLED", "1")
        .env("CGO_LDFLAGS", format!("-L{}", native_lib_dir().display()))
        .env("GOFLAGS", "-mod=mod")
        .output_within(BUILD);
    assert!(built.status.success(), "go build of driver.go:\n{}", String::from_utf8_lossy(&built.stderr));
    let launch =
        Launch { program: program.to_string_lossy().into_owned(), args: Vec::new(), env: Vec::new() };
    Some(Library { name: "go", launch, _dir: Some(dir) })
}

/// The Node.js package (node/): tests/conformance/drivers/driver.mjs, given the package's
/// directory, with this build's libticketing.so; koffi installed in node/ when missing.
fn node() -> Option<Library> {
    let node = std::env::var("NODE").unwrap_or_else(|_| "node".into());
    let install = "apt-get install nodejs npm (Node.js 18 or newer)";
    let probe = ["-e", "process.exit(Number(process.versions.node.split('.')[0]) >= 18 ? 0 : 1)"];
    if !have_or_skip("conformance of node", &node, &probe, "TICKETING_REQUIRE_NODE", install) {
        return None;
    }
    let package = repo().join("node");
    if !package.join("node_modules/koffi/package.json").is_file() {
        let npm = Command::new("npm")
            .args(["install", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund"])
            .current_dir(&package)
            .output_within(BUILD);
        assert!(npm.status.success(), "npm install in node/:\n{}", String::from_utf8_lossy(&npm.stderr));
    }
    let driver = repo().join("tests/conformance/drivers/driver.mjs");
    let args = vec![driver.to_string_lossy().into_owned(), package.to_string_lossy().into_owned()];
    let env = vec![(
        "TICKETING_LIBRARY".into(),
        native_lib_dir().join("libticketing.so").to_string_lossy().into_owned(),
    )];
    Some(Library { name: "node", launch: Launch { program: node, args, env }, _dir: None })
}

/// The Java library (java/): tests/conformance/drivers/driver.java compiled with javac
/// against the library's jar, which carries this build's libticketing.so; blocking (a
/// thread per command) or `--async` (the CompletableFuture forms).
fn java(asynchronous: bool) -> Option<Library> {
    let name = if asynchronous { "java-async" } else { "java" };
    if !super::common::java::have_java(&format!("conformance of {name}")) {
        return None;
    }
    let classpath = super::common::java::classpath();
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("Driver.java");
    std::fs::copy(repo().join("tests/conformance/drivers/driver.java"), &source).unwrap();
    let built = Command::new("javac")
        .args(["-cp", &classpath, "-d"])
        .arg(dir.path())
        .arg(&source)
        .output_within(BUILD);
    assert!(built.status.success(), "javac of driver.java:\n{}", String::from_utf8_lossy(&built.stderr));
    let mut args =
        vec!["-cp".to_string(), format!("{}:{classpath}", dir.path().display()), "Driver".to_string()];
    if asynchronous {
        args.push("--async".into());
    }
    Some(Library { name, launch: Launch { program: "java".into(), args, env: Vec::new() }, _dir: Some(dir) })
}

/// How one library's driver is built or found (`None`: skipped, and why was said).
type Build = fn() -> Option<Library>;

/// Every library this machine can test that `wanted` names, each built or found once.
pub fn available(wanted: impl Fn(&str) -> bool + Sync) -> Vec<Library> {
    // The servers the scenarios start are this build's.
    assert!(Command::new(bin()).arg("--version").try_output_within(CLI).is_ok_and(|o| o.status.success()));
    // Built side by side (the C, Go and Java drivers compile), listed in this order;
    // only those wanted are built.
    let builders: [(&str, Build); 8] = [
        ("rust", || Some(rust())),
        ("c", c),
        ("python", || python(false)),
        ("python-asyncio", || python(true)),
        ("go", go),
        ("node", node),
        ("java", || java(false)),
        ("java-async", || java(true)),
    ];
    std::thread::scope(|scope| {
        let builds: Vec<_> =
            builders.iter().filter(|(name, _)| wanted(name)).map(|(_, build)| scope.spawn(build)).collect();
        builds.into_iter().filter_map(|b| b.join().expect("a driver's build panicked")).collect()
    })
}
