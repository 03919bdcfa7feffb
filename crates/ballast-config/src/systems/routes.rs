//! `[systems.NAME.routes]`, `unrouted` and `path_case` read into the
//! vocabulary's [`Routes`], each route checked on the way: its key, its
//! kind, its attempt timeout within the system's, its sequence and follow.

use ballast::{Rule, Timeout};
use ballast_vocab::http::routes::{Follow, Route, RouteKind, Routes, Unrouted};

use super::{RouteValue, System};
use crate::finding::{system_path, KeyFinding};
use crate::suggest::did_you_mean;

/// `unrouted` and `path_case`: how a request that no route foresaw is
/// treated. The notes say what a file with routes leaves to the defaults.
pub(super) fn unrouted(
    name: &str,
    system: &System,
    routes: &Routes,
    problems: &mut Vec<KeyFinding>,
) -> Option<Unrouted> {
    let at = |key: &str| system_path(name, &[key]);
    let unrouted = match system.unrouted.as_deref().map(str::parse::<Unrouted>) {
        None => None,
        Some(Ok(unrouted)) => Some(unrouted),
        Some(Err(why)) => {
            problems.push(KeyFinding::error(
                Some(Rule::Re1),
                at("unrouted"),
                why,
                "use \"refuse\", \"once\" or \"by_method\"",
            ));
            None
        }
    };
    if unrouted == Some(Unrouted::Refuse) && routes.is_empty() {
        problems.push(KeyFinding::error(
            Some(Rule::Re1),
            at("unrouted"),
            "unrouted = \"refuse\" without routes refuses every write to the system".to_owned(),
            "declare the system's writes in [systems.NAME.routes], or leave unrouted out",
        ));
    }
    if unrouted == Some(Unrouted::ByMethod) && !routes.is_empty() {
        problems.push(KeyFinding::at(
            Some(Rule::Re1),
            ballast::Severity::Note,
            at("unrouted"),
            "a write no route matches is what its method and key make it: one the routes did not foresee is retried whenever it carries a key".to_owned(),
            "leave unrouted out (refuse) if every write of the system is declared, or use \"once\"",
        ));
    }
    match system.path_case.as_deref() {
        None | Some("sensitive") | Some("insensitive") => {}
        Some(other) => problems.push(KeyFinding::error(
            None,
            at("path_case"),
            format!("path_case {other:?} does not exist"),
            "use \"sensitive\" (the default) or \"insensitive\"",
        )),
    }
    if system.path_case.is_none() && !routes.is_empty() {
        problems.push(KeyFinding::at(
            None,
            ballast::Severity::Note,
            system_path(name, &["routes"]),
            "routes match paths in the case of their letters: `/Payments` is not `/payments`, and a write to it matches no route".to_owned(),
            "if the system routes paths whatever their case, say `path_case = \"insensitive\"`; `path_case = \"sensitive\"` silences this note",
        ));
    }
    unrouted
}

/// `[systems.NAME.routes]`, each checked: the key `METHOD /template`, the
/// kind, an attempt timeout within the system's. A route declared `read`
/// with a method that is not safe is allowed (the guide's "GET-equivalent"),
/// with a note; so is a key required by a system that does not deduplicate.
pub(super) fn routes(
    name: &str,
    system: &System,
    timeout: &Timeout,
    problems: &mut Vec<KeyFinding>,
) -> Routes {
    let mut routes = Routes::new().case_insensitive(system.path_case.as_deref() == Some("insensitive"));
    for (key, value) in system.routes.iter().flatten() {
        let at = |rest: &[&str]| {
            let mut path = vec!["routes", key.as_str()];
            path.extend_from_slice(rest);
            system_path(name, &path)
        };
        let Some((method, template)) = key.trim().split_once(' ') else {
            problems.push(KeyFinding::error(
                None,
                at(&[]),
                format!("route {key:?} is not `METHOD /path`"),
                "write the method, a space and the path template: \"POST /payments/{id}\"",
            ));
            continue;
        };
        let kind_at = if matches!(value, RouteValue::Table { .. }) { at(&["kind"]) } else { at(&[]) };
        let kind = match value.kind().map(str::parse::<RouteKind>) {
            Some(Ok(kind)) => kind,
            Some(Err(e)) => {
                let help =
                    match value.kind().and_then(|k| did_you_mean(k, RouteKind::ALL.map(RouteKind::as_str))) {
                        Some(k) => format!("did you mean \"{k}\"?"),
                        None => "use \"read\", \"keyed_write\" or \"write_once\"".to_owned(),
                    };
                problems.push(KeyFinding::error(Some(Rule::Re1), kind_at, e.to_string(), help));
                continue;
            }
            None => {
                problems.push(KeyFinding::error(
                    None,
                    at(&[]),
                    format!("route {key:?} has no kind"),
                    "add `kind = \"read\"` (or \"keyed_write\", \"write_once\")",
                ));
                continue;
            }
        };
        let mut route = match Route::new(method, template.trim(), kind) {
            Ok(route) => route,
            Err(e) => {
                problems.push(KeyFinding::error(
                    None,
                    at(&[]),
                    e.to_string(),
                    "a template is a path of literal segments, whole {param} segments and a last *",
                ));
                continue;
            }
        };
        if value.method_override() {
            route = route.method_override(true);
        }
        if let Some(sequence) = value.sequence() {
            match route.clone().sequence(sequence).map_err(|e| e.to_string()) {
                Ok(with) if kind == RouteKind::Read => {
                    problems.push(KeyFinding::error(
                        None,
                        at(&["sequence"]),
                        format!("{} is a read: a sequence orders writes", with.name()),
                        "drop `sequence`, or declare the route a write",
                    ));
                }
                Ok(with) => route = with,
                Err(why) => problems.push(KeyFinding::error(
                    None,
                    at(&["sequence"]),
                    why,
                    "a sequence names the entity a write changes from the route's {param}s, like \"customer/{id}\"",
                )),
            }
        }
        if let Some(follow) = value.follow() {
            match follow_of(follow) {
                _ if kind != RouteKind::KeyedWrite => problems.push(KeyFinding::error(
                    Some(Rule::Re1),
                    at(&["follow"]),
                    format!(
                        "{} is not a keyed_write: an operation is followed by a task named by its write's key",
                        route.name()
                    ),
                    "declare the route kind = \"keyed_write\" (its callers send an Idempotency-Key), or drop `follow`",
                )),
                Ok(follow) => route = route.follow(follow),
                Err(why) => problems.push(KeyFinding::error(
                    None,
                    at(&["follow"]),
                    why,
                    "write e.g. follow = { field = \"status\", done = [\"succeeded\", \"failed\"], deadline = \"1h\" }, or follow = {} to follow until a status other than 202",
                )),
            }
        }
        if let Some(limit) = value.timeout() {
            if limit > timeout.attempt() || limit.is_zero() {
                problems.push(KeyFinding::error(
                    None,
                    at(&["timeout"]),
                    format!(
                        "route {} has an attempt timeout of {limit:?}, outside the system's (0 to {:?})",
                        route.name(),
                        timeout.attempt()
                    ),
                    "a route may only shorten the system's attempt timeout; raise `timeout.attempt` of the system for all its routes",
                ));
            }
            route = route.timeout(limit);
        }
        let safe = ballast_vocab::http::routes::is_safe(route.method());
        if kind == RouteKind::Read && !safe {
            problems.push(KeyFinding::at(
                Some(Rule::Re1),
                ballast::Severity::Note,
                kind_at.clone(),
                format!(
                    "{} is declared read: it is retried like a GET (the guide's \"GET-equivalent\")",
                    route.name()
                ),
                "make sure it changes nothing on the system: a write declared read is retried without a key",
            ));
        }
        if kind == RouteKind::KeyedWrite && system.dedupes_by_key != Some(true) {
            problems.push(KeyFinding::at(
                Some(Rule::Re1),
                ballast::Severity::Note,
                kind_at.clone(),
                format!("{} requires a key, but the system does not deduplicate by key: each write is sent once", route.name()),
                "set `dedupes_by_key = true` if the system's contract deduplicates by the key, so keyed writes are retried",
            ));
        }
        match routes.clone().with(route) {
            Ok(more) => routes = more,
            Err(e) => problems.push(KeyFinding::error(
                None,
                at(&[]),
                e.to_string(),
                "declare each method and template once",
            )),
        }
    }
    routes
}

/// The [`Follow`] a route's `follow` table says.
fn follow_of(section: &crate::systems::FollowSection) -> Result<Follow, String> {
    let mut follow = Follow::new();
    match (section.field.as_deref(), section.done.as_deref()) {
        (Some(field), Some(done)) if !field.trim().is_empty() && !done.is_empty() => {
            follow = follow.field(field.trim(), done.iter().cloned());
        }
        (Some(_), _) => {
            return Err("`follow.field` needs `done`: the values that say the operation ended".into())
        }
        (None, Some(_)) => {
            return Err("`follow.done` needs `field`: the JSON field whose values they are".into())
        }
        (None, None) => {}
    }
    if let Some(deadline) = section.deadline {
        if deadline.get().is_zero() {
            return Err("`follow.deadline` is zero: the operation would fail before its first look".into());
        }
        follow = follow.deadline(deadline.get());
    }
    Ok(follow)
}
