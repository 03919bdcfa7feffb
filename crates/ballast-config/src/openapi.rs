//! A system's routes from its OpenAPI document (3.0 or 3.1, YAML or JSON):
//! what `ballast openapi import` prints and what `ballast lint --openapi`
//! checks a configuration against. The document says which operations take
//! an idempotency key; the routes make the gateway and `HttpSystem` hold
//! callers to it (R-RES-RE-1).
//!
//! Each operation under `paths` becomes a route, by the first rule that
//! applies:
//!
//! 1. `x-ballast-kind: read | keyed_write | write_once` on the operation;
//! 2. `x-idempotent: true` without the idempotency header: `read`, on any
//!    method — a POST search is idempotent by design, the guide's
//!    "GET-equivalent" (`ballast lint` notes a read that is not a GET);
//! 3. GET, HEAD, OPTIONS: `read`;
//! 4. a header parameter named as the system's idempotency header (on the
//!    operation or its path, `$ref`s to `#/components/parameters` followed):
//!    `keyed_write`;
//! 5. anything else: `write_once`.
//!
//! `x-ballast-sequence: "customer/{id}"` on a write gives its route a
//! sequence (its `{param}`s from the path template): writes to one entity
//! are applied in the order they were accepted.
//!
//! The document is read with `saphyr`, which keeps every node's line, so a
//! finding names the line of the operation it is about.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::rc::Rc;

use ballast::{Rule, Severity};
use ballast_vocab::http::routes::{self, Route, RouteKind};
use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};

use crate::finding::Finding;
use crate::source::Location;

/// The methods an OpenAPI path item may hold.
const METHODS: [&str; 8] = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

/// How many `$ref`s are followed before giving up (a cycle).
const MAX_REFS: usize = 8;

/// One operation of the document and the route it makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiOperation {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path template, as the document writes it (`/payments/{id}`).
    pub path: String,
    /// Where the operation is: its method's line and column.
    pub location: Location,
    /// The kind its route gets.
    pub kind: RouteKind,
    /// Which rule decided the kind.
    pub why: &'static str,
    /// Whether it takes the idempotency header.
    pub takes_key: bool,
    /// Its route's sequence (`x-ballast-sequence`), if it has one.
    pub sequence: Option<String>,
}

/// [`routes::is_safe`] of a method as the document spells it.
fn is_safe_name(method: &str) -> bool {
    http::Method::from_bytes(method.as_bytes()).is_ok_and(|m| routes::is_safe(&m))
}

impl ApiOperation {
    /// `POST /payments`.
    pub fn name(&self) -> String {
        format!("{} {}", self.method, self.path)
    }

    fn is_safe(&self) -> bool {
        is_safe_name(&self.method)
    }
}

/// The operations of a document, in its order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// The file, as named.
    pub file: String,
    /// Every operation.
    pub operations: Vec<ApiOperation>,
}

/// A document that cannot be read as OpenAPI.
#[derive(Debug, thiserror::Error)]
pub enum OpenApiError {
    /// The file cannot be read.
    #[error("cannot read {file}: {source}")]
    Read {
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not YAML or JSON.
    #[error("{file}:{line}:{column}: not YAML or JSON: {message}")]
    Syntax {
        /// The file.
        file: String,
        /// Where.
        line: usize,
        /// Where.
        column: usize,
        /// What the parser says.
        message: String,
    },
    /// YAML, but not an OpenAPI document.
    #[error("{file}: {why}; an OpenAPI 3.0 or 3.1 document has `openapi: 3.x` and `paths`")]
    NotOpenApi {
        /// The file.
        file: String,
        /// What is missing.
        why: String,
    },
    /// A path or method with a control character: no endpoint has one, and
    /// printed into a configuration it could end a line and start a table.
    #[error("{file}:{line}: the {what} {name} has a control character; fix the document")]
    ControlCharacter {
        /// The file.
        file: String,
        /// Where.
        line: usize,
        /// `path` or `method`.
        what: &'static str,
        /// The name, its control characters escaped.
        name: String,
    },
    /// An `x-ballast-sequence` its operation cannot have.
    #[error("{file}:{line}: x-ballast-sequence: {why}")]
    Sequence {
        /// The file.
        file: String,
        /// Where.
        line: usize,
        /// What is wrong.
        why: String,
    },
}

/// Reads the document at `path`; `key_header` is the system's idempotency header.
pub fn read(path: &Path, key_header: &str) -> Result<Document, OpenApiError> {
    let file = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|source| OpenApiError::Read { file: file.clone(), source })?;
    parse(&file, &text, key_header)
}

/// Parses `text` (named `file` in errors and findings).
pub fn parse(file: &str, text: &str, key_header: &str) -> Result<Document, OpenApiError> {
    let docs = MarkedYaml::load_from_str(text).map_err(|e| OpenApiError::Syntax {
        file: file.to_owned(),
        line: e.marker().line(),
        column: e.marker().col() + 1,
        message: e.info().to_owned(),
    })?;
    let not = |why: &str| OpenApiError::NotOpenApi { file: file.to_owned(), why: why.to_owned() };
    let root = docs.first().ok_or_else(|| not("the file is empty"))?;
    let version = get(root, "openapi").and_then(text_of).ok_or_else(|| not("no `openapi` version"))?;
    if !version.starts_with("3.") {
        return Err(not(&format!(
            "`openapi: {version}` is not 3.0 or 3.1 (Swagger 2 documents convert with swagger2openapi)"
        )));
    }
    let paths = get(root, "paths").and_then(mapping).ok_or_else(|| not("no `paths`"))?;
    let refs = Refs::new(root);
    let mut operations = Vec::new();
    for (path_key, item) in paths {
        let Some(path) = text_of(path_key) else { continue };
        if path.chars().any(char::is_control) {
            return Err(OpenApiError::ControlCharacter {
                file: file.to_owned(),
                line: path_key.span.start.line(),
                what: "path",
                name: format!("{path:?}"),
            });
        }
        let item = refs.resolve(item);
        let shared = refs.params(get(item, "parameters"));
        for (method_key, op) in mapping(item).into_iter().flatten() {
            let Some(method) = text_of(method_key).filter(|m| METHODS.contains(m)) else { continue };
            let method = method.to_ascii_uppercase();
            let mut header_params = shared.clone();
            header_params.extend(refs.params(get(op, "parameters")));
            let takes_key = header_params.iter().any(|name| name.eq_ignore_ascii_case(key_header));
            let safe = is_safe_name(&method);
            let declared =
                get(op, "x-ballast-kind").and_then(text_of).and_then(|k| k.parse::<RouteKind>().ok());
            let idempotent = get(op, "x-idempotent")
                .is_some_and(|v| matches!(v.data, YamlData::Value(Scalar::Boolean(true))));
            let (kind, why) = match declared {
                Some(kind) => (kind, "x-ballast-kind"),
                None if idempotent && !takes_key => (RouteKind::Read, "x-idempotent"),
                None if safe => (RouteKind::Read, "a safe method"),
                None if takes_key => (RouteKind::KeyedWrite, "takes the idempotency header"),
                None => (RouteKind::WriteOnce, "a write without the idempotency header"),
            };
            let at = method_key.span.start;
            let sequence = match get(op, "x-ballast-sequence") {
                None => None,
                Some(node) => {
                    let bad = |why: String| OpenApiError::Sequence {
                        file: file.to_owned(),
                        line: node.span.start.line(),
                        why,
                    };
                    let text = text_of(node)
                        .ok_or_else(|| bad("a sequence is a string, like \"customer/{id}\"".into()))?;
                    if kind == RouteKind::Read {
                        return Err(bad(format!("{method} {path} is a read: a sequence orders writes")));
                    }
                    let route = Route::new(&method, path, kind).map_err(|e| bad(e.to_string()))?;
                    route.sequence(text).map_err(|e| bad(e.to_string()))?;
                    Some(text.to_owned())
                }
            };
            operations.push(ApiOperation {
                method,
                path: path.to_owned(),
                location: Location { line: at.line(), column: at.col() + 1 },
                kind,
                why,
                takes_key,
                sequence,
            });
        }
    }
    Ok(Document { file: file.to_owned(), operations })
}

/// The value of `key` in the mapping `node`.
fn get<'a>(node: &'a MarkedYaml<'a>, key: &str) -> Option<&'a MarkedYaml<'a>> {
    mapping(node)?.find(|(k, _)| text_of(k) == Some(key)).map(|(_, v)| v)
}

fn mapping<'a>(
    node: &'a MarkedYaml<'a>,
) -> Option<impl Iterator<Item = (&'a MarkedYaml<'a>, &'a MarkedYaml<'a>)>> {
    match &node.data {
        YamlData::Mapping(map) => Some(map.iter()),
        _ => None,
    }
}

fn text_of<'a>(node: &'a MarkedYaml<'a>) -> Option<&'a str> {
    match &node.data {
        YamlData::Value(Scalar::String(s)) => Some(s),
        _ => None,
    }
}

/// `$ref`s within the document, followed through an index of each
/// mapping they pass (made the first time one is passed): a document of
/// 50,000 parameters referenced 50,000 times is read in linear time, not
/// by scanning `components` once per reference.
struct Refs<'a> {
    root: &'a MarkedYaml<'a>,
    /// Per mapping (by address), its entries by key.
    index: std::cell::RefCell<HashMap<usize, Rc<HashMap<&'a str, &'a MarkedYaml<'a>>>>>,
}

impl<'a> Refs<'a> {
    fn new(root: &'a MarkedYaml<'a>) -> Self {
        Self { root, index: Default::default() }
    }

    /// `node`, or what its `$ref` (within the document) points at.
    fn resolve(&self, mut node: &'a MarkedYaml<'a>) -> &'a MarkedYaml<'a> {
        for _ in 0..MAX_REFS {
            let Some(target) = get(node, "$ref").and_then(text_of) else { return node };
            let Some(pointer) = target.strip_prefix("#/") else { return node };
            let mut at = self.root;
            for part in pointer.split('/') {
                let part = part.replace("~1", "/").replace("~0", "~");
                match self.entries(at).get(part.as_str()) {
                    Some(next) => at = next,
                    None => return node,
                }
            }
            node = at;
        }
        node
    }

    /// The entries of the mapping `node`, indexed once.
    fn entries(&self, node: &'a MarkedYaml<'a>) -> Rc<HashMap<&'a str, &'a MarkedYaml<'a>>> {
        let address = node as *const MarkedYaml<'a> as usize;
        let mut index = self.index.borrow_mut();
        let entries = index.entry(address).or_insert_with(|| {
            let entries = mapping(node).into_iter().flatten().filter_map(|(k, v)| Some((text_of(k)?, v)));
            Rc::new(entries.collect())
        });
        Rc::clone(entries)
    }

    /// The names of the header parameters in a `parameters` list.
    fn params(&self, list: Option<&'a MarkedYaml<'a>>) -> Vec<String> {
        let YamlData::Sequence(items) = list.map(|l| &l.data).unwrap_or(&YamlData::BadValue) else {
            return Vec::new();
        };
        items
            .iter()
            .map(|p| self.resolve(p))
            .filter(|p| get(p, "in").and_then(text_of) == Some("header"))
            .filter_map(|p| get(p, "name").and_then(text_of).map(str::to_owned))
            .collect()
    }
}

impl Document {
    /// The `[systems.SYSTEM.routes]` table of every operation, each with the
    /// rule that decided it and its line, ready to paste into a config.
    /// Every name is written as TOML's own quoting writes it, so no path
    /// of a document can close its string and start a key or a table of
    /// its own in the pasted file.
    pub fn routes_toml(&self, system: &str) -> String {
        let mut out = format!("[systems.{}.routes]\n", toml_key(system));
        let keys: Vec<String> = self.operations.iter().map(|op| toml_string(&op.name())).collect();
        let width = keys.iter().map(|k| k.chars().count()).max().unwrap_or(0);
        let file = crate::report::printable(&self.file).replace('\n', "\\n");
        for (op, key) in self.operations.iter().zip(&keys) {
            let value = match &op.sequence {
                None => toml_string(op.kind.as_str()),
                Some(sequence) => {
                    format!(
                        "{{ kind = {}, sequence = {} }}",
                        toml_string(op.kind.as_str()),
                        toml_string(sequence)
                    )
                }
            };
            let _ = writeln!(out, "{key:<width$} = {value:<13} # {file}:{}: {}", op.location.line, op.why);
        }
        out
    }

    /// Checks `routes` (the configured ones of a system, each with where
    /// the config declares it) against the document: routes that match no
    /// operation, writes the config leaves undeclared, keyed writes whose
    /// operation takes no key.
    pub fn check(
        &self,
        config_file: &str,
        routes: &[(Route, Option<Location>)],
        key_header: &str,
    ) -> Vec<Finding> {
        let mut out = Vec::new();
        // A sample path per operation, `{param}` segments filled in: what a
        // route template is matched against.
        let samples: Vec<String> = self.operations.iter().map(|op| sample(&op.path)).collect();
        let serves = |route: &Route, i: usize| {
            route.method().as_str() == self.operations[i].method && route.matches(&samples[i])
        };
        // Findings about the document are R-RES-RE-1 warnings at the operation's line.
        let at_operation = |op: &ApiOperation, message: String, help: String| Finding {
            rule: Some(Rule::Re1),
            severity: Severity::Warning,
            file: self.file.clone(),
            location: Some(op.location),
            span: None,
            message,
            help,
        };
        for (route, at) in routes {
            let matched: Vec<&ApiOperation> = (0..self.operations.len())
                .filter(|&i| serves(route, i))
                .map(|i| &self.operations[i])
                .collect();
            if matched.is_empty() {
                out.push(Finding {
                    rule: None,
                    severity: Severity::Warning,
                    file: config_file.to_owned(),
                    location: *at,
                    span: None,
                    message: format!("route {} matches no operation of {}", route.name(), self.file),
                    help: "fix the method or the template, or remove the route: the document has no such endpoint"
                        .to_owned(),
                });
            }
            if route.kind() == RouteKind::KeyedWrite {
                for op in matched.iter().filter(|op| !op.takes_key) {
                    out.push(at_operation(
                        op,
                        format!(
                            "route {} requires a key, but {} takes no `{key_header}` header in the document",
                            route.name(),
                            op.name()
                        ),
                        "check that the system deduplicates this endpoint by key (R-RES-RE-1); if it does, add the header parameter to the document".to_owned(),
                    ));
                }
            }
        }
        for (i, op) in self.operations.iter().enumerate().filter(|(_, op)| !op.is_safe()) {
            if !routes.iter().any(|(route, _)| serves(route, i)) {
                out.push(at_operation(
                    op,
                    format!(
                        "the write {} is not declared in the config's routes: it is a keyed write when a caller sends a key, else written once",
                        op.name()
                    ),
                    format!("declare it: \"{}\" = \"{}\" (`ballast openapi import` prints every route)", op.name(), op.kind),
                ));
            }
        }
        out
    }
}

/// `text` as a TOML basic string, quoted and escaped by the `toml` crate.
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

/// `name` as a TOML key: bare when it may be, else quoted.
fn toml_key(name: &str) -> String {
    let bare = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if bare {
        name.to_owned()
    } else {
        toml_string(name)
    }
}

/// A path that matches `template`: each `{param}` filled in.
fn sample(template: &str) -> String {
    template
        .split('/')
        .map(|segment| if segment.starts_with('{') && segment.ends_with('}') { "x" } else { segment })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAY: &str = r#"openapi: 3.1.0
info: { title: pay, version: "1" }
components:
  parameters:
    Key:
      name: Idempotency-Key
      in: header
      required: true
      schema: { type: string }
paths:
  /payments:
    post:
      parameters:
        - $ref: '#/components/parameters/Key'
    get: {}
  /payments/search:
    post:
      x-ballast-kind: read
  /payments/{id}:
    parameters:
      - { name: id, in: path, required: true }
    patch: {}
    put:
      x-idempotent: true
"#;

    #[test]
    fn every_operation_gets_the_kind_its_contract_says() {
        let doc = parse("pay.yaml", PAY, "idempotency-key").unwrap();
        let kinds: Vec<_> = doc.operations.iter().map(|o| (o.name(), o.kind, o.location.line)).collect();
        assert_eq!(
            kinds,
            [
                ("POST /payments".to_owned(), RouteKind::KeyedWrite, 12),
                ("GET /payments".to_owned(), RouteKind::Read, 15),
                ("POST /payments/search".to_owned(), RouteKind::Read, 17),
                ("PATCH /payments/{id}".to_owned(), RouteKind::WriteOnce, 22),
                ("PUT /payments/{id}".to_owned(), RouteKind::Read, 23),
            ]
        );
    }

    /// An operation idempotent by design (a POST search) is a read; one
    /// that takes the idempotency header stays a keyed write.
    #[test]
    fn x_idempotent_is_a_read_unless_the_operation_takes_the_key() {
        let doc = "openapi: 3.0.0\npaths:\n  /search:\n    post:\n      x-idempotent: true\n  /payments:\n    post:\n      x-idempotent: true\n      parameters:\n        - { name: Idempotency-Key, in: header }\n";
        let doc = parse("s.yaml", doc, "idempotency-key").unwrap();
        let kinds: Vec<_> = doc.operations.iter().map(|o| (o.name(), o.kind, o.why)).collect();
        assert_eq!(
            kinds,
            [
                ("POST /search".to_owned(), RouteKind::Read, "x-idempotent"),
                ("POST /payments".to_owned(), RouteKind::KeyedWrite, "takes the idempotency header"),
            ]
        );
    }

    /// A write's `x-ballast-sequence` becomes its route's sequence; one that
    /// names a parameter the path lacks, or sits on a read, is refused at
    /// its line.
    #[test]
    fn x_ballast_sequence_becomes_the_route_s_sequence() {
        let doc = "openapi: 3.0.0\npaths:\n  /customers/{id}:\n    put:\n      x-ballast-sequence: customer/{id}\n      parameters:\n        - { name: Idempotency-Key, in: header }\n";
        let doc = parse("c.yaml", doc, "idempotency-key").unwrap();
        assert_eq!(doc.operations[0].sequence.as_deref(), Some("customer/{id}"));
        let printed = doc.routes_toml("crm");
        let parsed: toml::Table = printed.parse().unwrap_or_else(|e| panic!("{e}\n{printed}"));
        let route = &parsed["systems"]["crm"]["routes"]["PUT /customers/{id}"];
        assert_eq!(route["kind"].as_str(), Some("keyed_write"), "{printed}");
        assert_eq!(route["sequence"].as_str(), Some("customer/{id}"), "{printed}");
        let unknown = "openapi: 3.0.0\npaths:\n  /customers/{id}:\n    put:\n      x-ballast-sequence: customer/{cid}\n";
        let err = parse("c.yaml", unknown, "idempotency-key").unwrap_err().to_string();
        assert!(err.starts_with("c.yaml:5: x-ballast-sequence:") && err.contains("{cid}"), "{err}");
        let read =
            "openapi: 3.0.0\npaths:\n  /customers/{id}:\n    get:\n      x-ballast-sequence: customer/{id}\n";
        let err = parse("c.yaml", read, "idempotency-key").unwrap_err().to_string();
        assert!(err.contains("a sequence orders writes"), "{err}");
    }

    /// N8: a path cannot inject keys or tables into the pasted file, and
    /// a control character in one is refused.
    #[test]
    fn printed_routes_are_toml_whatever_the_document_names() {
        let injected = "openapi: 3.0.0\npaths:\n  '/refunds\" = \"read\"\\n[[alerts.webhook]]\\nurl_env = \"X':\n    post: {}\n  /a\"b:\n    put: {}\n";
        let doc = parse("evil.yaml", injected, "idempotency-key").unwrap();
        let toml_text = doc.routes_toml("pay");
        let parsed: toml::Table = toml_text.parse().unwrap_or_else(|e| panic!("{e}\n{toml_text}"));
        let routes = parsed["systems"]["pay"]["routes"].as_table().unwrap();
        assert_eq!(routes.len(), 2, "{toml_text}");
        assert!(parsed.get("alerts").is_none(), "no table of its own: {toml_text}");
        assert_eq!(routes["PUT /a\"b"].as_str(), Some("write_once"));
        let control = "openapi: 3.0.0\npaths:\n  \"/a\\u001b[2Jb\":\n    post: {}\n";
        let err = parse("c.yaml", control, "k").unwrap_err().to_string();
        assert!(err.contains("control character") && !err.contains('\u{1b}'), "{err}");
        assert!(parse("ok.yaml", "openapi: 3.0.0\npaths: {}\n", "k")
            .unwrap()
            .routes_toml("my sys")
            .starts_with("[systems.\"my sys\".routes]"));
    }

    #[test]
    fn json_reads_as_well_and_bad_documents_say_why() {
        let json = r#"{"openapi": "3.0.3", "paths": {"/a": {"post": {"parameters": [{"name": "X-Key", "in": "header"}]}}}}"#;
        let doc = parse("a.json", json, "x-key").unwrap();
        assert_eq!((doc.operations[0].kind, doc.operations[0].location.line), (RouteKind::KeyedWrite, 1));
        assert!(parse("b.yaml", "swagger: '2.0'\npaths: {}\n", "k")
            .unwrap_err()
            .to_string()
            .contains("no `openapi`"));
        assert!(parse("c.yaml", "openapi: 2.0\npaths: {}\n", "k").is_err());
        let broken = parse("d.yaml", "openapi: 3.0.0\npaths: [\n", "k").unwrap_err().to_string();
        assert!(broken.starts_with("d.yaml:"), "{broken}");
    }
}
