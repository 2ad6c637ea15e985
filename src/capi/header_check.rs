//! The header against the library, mechanically: every function of
//! include/ticketing.h is exported with the same name, parameter names and types, and
//! every exported function is in the header. Rust types are mapped to the C types the
//! header must spell (one table, [`c_type`]); any difference fails with both sides.

/// The C spelling of a Rust parameter or return type of an exported function.
fn c_type(rust: &str) -> String {
    let rust = rust.trim();
    if let Some(inner) = rust.strip_prefix("*const ") {
        // A pointer to a const pointer is spelled `T *const *`.
        let inner = c_type(inner);
        return if inner.ends_with('*') { format!("{inner}const *") } else { format!("const {inner} *") };
    }
    if let Some(inner) = rust.strip_prefix("*mut ") {
        return format!("{} *", c_type(inner)).replace("* *", "**");
    }
    match rust {
        "" => "void",
        "c_int" => "int",
        "u8" => "uint8_t",
        "u32" => "uint32_t",
        "u64" => "uint64_t",
        "i64" => "int64_t",
        "usize" => "size_t",
        "c_char" => "char",
        "c_void" => "void",
        "ClientPtr" => "ticketing_client",
        "LockPtr" => "ticketing_lock",
        "ErrorPtr" => "ticketing_error",
        "Holder" => "ticketing_holder",
        "Option<logging::LogFn>" => "ticketing_log_fn",
        "Option<CallbackFn>" => "ticketing_callback",
        "Option<WaitCheckFn>" => "ticketing_wait_check_fn",
        "FuturePtr" => "ticketing_future",
        "QueuePtr" => "ticketing_queue",
        other => panic!("no C spelling for the Rust type {other:?}: add it to header_check.rs"),
    }
    .to_string()
}

/// `name -> (return type, [(parameter, type)])`, types normalised to single spaces.
type Signatures = std::collections::BTreeMap<String, (String, Vec<(String, String)>)>;

fn normalise(c: &str) -> String {
    let spaced = c.replace('*', " * ");
    let joined = spaced.split_whitespace().collect::<Vec<_>>().join(" ");
    joined.replace("* *", "**").replace("const char * const *", "const char *const *")
}

/// Every prototype of the header.
fn header_signatures(header: &str) -> Signatures {
    let mut text = String::new();
    let mut rest = header;
    while let Some(start) = rest.find("/*") {
        text.push_str(&rest[..start]);
        rest = &rest[start + rest[start..].find("*/").unwrap() + 2..];
    }
    text.push_str(rest);
    let text: String =
        text.lines().filter(|l| !l.trim_start().starts_with('#')).collect::<Vec<_>>().join(" ");
    let mut out = Signatures::new();
    for decl in text.split(';') {
        let decl = decl.trim();
        let Some(open) = decl.find('(') else { continue };
        if decl.starts_with("typedef") || !decl.ends_with(')') {
            continue;
        }
        let head = decl[..open].trim();
        let Some(name_at) = head.rfind(|c: char| !(c.is_alphanumeric() || c == '_')) else { continue };
        let name = &head[name_at + 1..];
        if !name.starts_with("ticketing_") {
            continue;
        }
        let ret = normalise(&head[..=name_at]);
        let args = &decl[open + 1..decl.len() - 1];
        let params = if args.trim() == "void" {
            Vec::new()
        } else {
            args.split(',')
                .map(|p| {
                    let p = p.trim();
                    let at = p.rfind(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap();
                    (p[at + 1..].to_string(), normalise(&p[..=at]))
                })
                .collect()
        };
        assert!(out.insert(name.to_string(), (ret, params)).is_none(), "{name} is declared twice");
    }
    out
}

/// Every `extern "C" fn` of the sources.
fn exported_signatures(sources: &str) -> Signatures {
    let mut out = Signatures::new();
    for (i, _) in sources.match_indices("extern \"C\" fn ") {
        let rest = &sources[i + "extern \"C\" fn ".len()..];
        let name = &rest[..rest.find('(').unwrap()];
        // The parameter list ends at the parenthesis that closes the first one.
        let mut depth = 0;
        let mut end = 0;
        for (j, c) in rest.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = j;
                        break;
                    }
                }
                _ => {}
            }
        }
        let args = &rest[name.len() + 1..end];
        let after = &rest[end + 1..rest[end..].find('{').unwrap() + end];
        let ret = after.trim().strip_prefix("->").unwrap_or("").trim();
        let mut params = Vec::new();
        let mut depth = 0;
        let mut current = String::new();
        for c in args.chars().chain([',']) {
            match c {
                '<' | '(' => depth += 1,
                '>' | ')' => depth -= 1,
                ',' if depth == 0 => {
                    if let Some((p, t)) = current.split_once(':') {
                        params.push((p.trim().to_string(), normalise(&c_type(t))));
                    }
                    current.clear();
                    continue;
                }
                _ => {}
            }
            current.push(c);
        }
        out.insert(name.to_string(), (normalise(&c_type(ret)), params));
    }
    out
}

#[test]
fn the_header_declares_every_exported_function_with_the_same_signature() {
    let header = header_signatures(include_str!("../../include/ticketing.h"));
    let sources = [
        include_str!("mod.rs"),
        include_str!("client.rs"),
        include_str!("lock.rs"),
        include_str!("error.rs"),
        include_str!("error_getters.rs"),
        include_str!("future.rs"),
        include_str!("queue.rs"),
    ]
    .concat();
    let exported = exported_signatures(&sources);
    assert!(exported.len() >= 26, "found {} exported functions", exported.len());
    for (name, rust) in &exported {
        let c =
            header.get(name).unwrap_or_else(|| panic!("{name} is exported but not in include/ticketing.h"));
        assert_eq!(c, rust, "{name}: the header (left) and the library (right) differ");
    }
    for name in header.keys() {
        assert!(exported.contains_key(name), "{name} is in the header but not exported");
    }
}

#[test]
fn the_check_sees_a_changed_type_a_renamed_parameter_and_a_missing_function() {
    let lib = "pub unsafe extern \"C\" fn ticketing_x(a: *const ClientPtr, n: usize) -> c_int {";
    let exported = exported_signatures(lib);
    let same = header_signatures("int ticketing_x(const ticketing_client *a, size_t n);");
    assert_eq!(same, exported);
    for other in [
        "int ticketing_x(const ticketing_client *a, int n);",
        "int ticketing_x(const ticketing_client *b, size_t n);",
        "int ticketing_x(ticketing_client *a, size_t n);",
        "void ticketing_x(const ticketing_client *a, size_t n);",
        "int ticketing_y(const ticketing_client *a, size_t n);",
    ] {
        assert_ne!(header_signatures(other), exported, "{other}");
    }
}
