//! The dashboard's stylesheet and script, compiled into the binary: no CDN,
//! nothing fetched from elsewhere.

use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

const STYLE: &str = include_str!("assets/style.css");
const LIVE: &str = include_str!("assets/live.js");

pub(super) async fn serve(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "style.css" => (STYLE, "text/css; charset=utf-8"),
        "live.js" => (LIVE, "text/javascript; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    };
    ([(CONTENT_TYPE, kind), (CACHE_CONTROL, "max-age=300")], body).into_response()
}
