//! What a delivered write's upstream answered, kept with its task: the
//! status, the headers that say something about the result, and the body up
//! to a size — so whoever deferred the write learns what the system made of
//! it (a payment's id) without sending it again.

use std::collections::BTreeMap;

use ballast::IdempotencyKey;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use http::header::{self, HeaderMap, HeaderName};
use serde::{Deserialize, Serialize};

use crate::seal::SealError;
use crate::{HttpError, HttpSystem, Response};

use super::Delivery;

/// How much of an answer's body a delivery keeps unless configured
/// ([`HttpSystemBuilder::keep_answer`](crate::HttpSystemBuilder::keep_answer)).
pub const DEFAULT_KEEP_ANSWER: usize = 64 * 1024;

/// What a delivered [`Delivery`](crate::Delivery) task stores as its result
/// ([`TaskInfo::result`](ballast_queue::TaskInfo::result)): the upstream's
/// final answer. Its headers and body are in [`answer`](Self::answer), or,
/// when the request was sealed or the system seals answers, in
/// [`sealed`](Self::sealed) — opened with [`HttpSystem::open_answer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryResult {
    /// The HTTP status the upstream answered the delivering attempt with.
    pub status: u16,
    /// The answer's headers and body, stored in clear.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Answer>,
    /// The answer's headers and body, sealed with the system's seal key and
    /// bound to the delivery and its key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed: Option<String>,
    /// The id of the key that sealed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal_key: Option<String>,
}

/// An upstream's answer as a task keeps it.
///
/// ```
/// use ballast_http::delivery::Answer;
///
/// let answer: Answer = serde_json::from_str(
///     r#"{"headers":{"content-type":"application/json"},"body":"{\"id\":\"pay_1\"}","body_size":14,"body_kept":true}"#,
/// ).unwrap();
/// assert_eq!(answer.json::<serde_json::Value>().unwrap()["id"], "pay_1");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Answer {
    /// Its end-to-end headers, names in lower case, values joined with
    /// `, ` when repeated — without `Set-Cookie` and the transport's own
    /// (`Date`, `Server`, `Content-Length`, `Alt-Svc`, …).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The body as text, when it is UTF-8 and was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The body in base64, when it is not UTF-8 and was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    /// The body's size in bytes, kept or not.
    #[serde(default)]
    pub body_size: u64,
    /// Whether the body was kept: `false` when it was larger than the
    /// system keeps ([`HttpSystemBuilder::keep_answer`](crate::HttpSystemBuilder::keep_answer)).
    #[serde(default)]
    pub body_kept: bool,
}

/// Headers that say how the answer travelled, not what it says (the
/// hop-by-hop ones of RFC 9110 §7.6.1 among them), and `Set-Cookie`, a
/// credential of the gateway's session with the system.
const NOT_KEPT: [HeaderName; 16] = [
    header::SET_COOKIE,
    header::DATE,
    header::SERVER,
    header::CONTENT_LENGTH,
    header::ALT_SVC,
    header::STRICT_TRANSPORT_SECURITY,
    header::VIA,
    header::VARY,
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

impl Answer {
    /// `response`'s headers and, up to `keep` bytes, its body.
    pub fn of(response: &Response, keep: usize) -> Answer {
        let body = response.body();
        let kept = body.len() <= keep;
        let (text, base64) = match (kept, std::str::from_utf8(body)) {
            (false, _) => (None, None),
            (true, _) if body.is_empty() => (None, None),
            (true, Ok(text)) => (Some(text.to_owned()), None),
            (true, Err(_)) => (None, Some(BASE64.encode(body))),
        };
        Answer {
            headers: kept_headers(response.headers()),
            body: text,
            body_base64: base64,
            body_size: body.len() as u64,
            body_kept: kept,
        }
    }

    /// The body's bytes, when it was kept.
    pub fn body_bytes(&self) -> Option<Vec<u8>> {
        match (&self.body, &self.body_base64) {
            (Some(text), _) => Some(text.as_bytes().to_vec()),
            (None, Some(data)) => BASE64.decode(data).ok(),
            (None, None) => self.body_kept.then(Vec::new),
        }
    }

    /// The body read as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, HttpError> {
        let bytes = self.body_bytes().ok_or_else(|| {
            HttpError::invalid(format!("the answer's body ({} bytes) was not kept", self.body_size))
        })?;
        serde_json::from_slice(&bytes).map_err(|e| HttpError::invalid(format!("the answer is not JSON: {e}")))
    }
}

fn kept_headers(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut kept = BTreeMap::<String, String>::new();
    for (name, value) in headers {
        let Ok(value) = value.to_str() else { continue };
        if NOT_KEPT.contains(name) {
            continue;
        }
        kept.entry(name.as_str().to_owned())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(value);
            })
            .or_insert_with(|| value.to_owned());
    }
    kept
}

impl HttpSystem {
    /// What a delivery task whose attempt got `response` stores: the answer
    /// in clear, or sealed when the request was (it carried credentials or
    /// a body under the seal key) or the system
    /// [seals answers](crate::HttpSystemBuilder::seal_answers).
    pub(super) fn keep_answer_of(
        &self,
        key: &IdempotencyKey,
        delivery: &Delivery,
        response: &Response,
    ) -> DeliveryResult {
        let answer = Answer::of(response, self.kept_answer_size());
        let status = response.status().as_u16();
        let sealed_request = !delivery.sealed_parts.is_empty()
            || !delivery.sealed_headers.is_empty()
            || matches!(delivery.body, Some(super::Body::Sealed(_)));
        match self.seal_key().filter(|_| sealed_request || self.seals_answers()) {
            Some(seal) => {
                // An answer always serializes: a map of strings and numbers.
                let plain = serde_json::to_vec(&answer).unwrap_or_default();
                let sealed = seal.seal(&answer_place(delivery, key), &plain);
                DeliveryResult {
                    status,
                    answer: None,
                    sealed: Some(sealed),
                    seal_key: Some(seal.id().to_owned()),
                }
            }
            None => DeliveryResult { status, answer: Some(answer), sealed: None, seal_key: None },
        }
    }

    /// The answer a delivered task keeps, opened when it is sealed; `None`
    /// for a result stored before answers were kept (its status alone).
    pub fn open_answer(
        &self,
        key: &IdempotencyKey,
        delivery: &Delivery,
        result: &DeliveryResult,
    ) -> Result<Option<Answer>, HttpError> {
        let Some(sealed) = &result.sealed else { return Ok(result.answer.clone()) };
        let unsealed = |source| HttpError::Unseal { part: "answer".to_owned(), source };
        let seal = self.seal_key().ok_or(unsealed(SealError::NoKey))?;
        let plain =
            seal.open(result.seal_key.as_deref(), &answer_place(delivery, key), sealed).map_err(unsealed)?;
        serde_json::from_slice(&plain)
            .map(Some)
            .map_err(|e| HttpError::invalid(format!("the sealed answer: {e}")))
    }
}

/// What a sealed answer is bound to: its delivery, and that it is the answer.
fn answer_place(delivery: &Delivery, key: &IdempotencyKey) -> Vec<u8> {
    let mut place = delivery.bound(key);
    place.extend_from_slice(b"\0answer");
    place
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, headers: &[(&str, &str)], body: &'static [u8]) -> Response {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), value.parse().unwrap());
        }
        Response {
            status: http::StatusCode::from_u16(status).unwrap(),
            headers: map,
            body: bytes::Bytes::from_static(body),
            attempts: 1,
            verdict: None,
            rest: None,
        }
    }

    #[test]
    fn an_answer_keeps_what_it_says_and_drops_how_it_travelled() {
        let answer = Answer::of(
            &response(
                201,
                &[
                    ("content-type", "application/json"),
                    ("location", "/payments/pay_1"),
                    ("set-cookie", "session=secret"),
                    ("date", "Fri, 04 Dec 2026 10:00:00 GMT"),
                    ("connection", "keep-alive"),
                    ("link", "<a>"),
                    ("link", "<b>"),
                ],
                br#"{"id":"pay_1"}"#,
            ),
            1024,
        );
        assert_eq!(
            answer.headers.keys().map(String::as_str).collect::<Vec<_>>(),
            ["content-type", "link", "location"]
        );
        assert_eq!(answer.headers["link"], "<a>, <b>");
        assert_eq!(answer.json::<serde_json::Value>().unwrap()["id"], "pay_1");
        assert_eq!((answer.body_size, answer.body_kept), (14, true));

        let binary = Answer::of(&response(200, &[], &[0xff, 0x00]), 1024);
        assert_eq!((binary.body.as_deref(), binary.body_base64.as_deref()), (None, Some("/wA=")));
        assert_eq!(binary.body_bytes(), Some(vec![0xff, 0x00]));
    }

    #[test]
    fn a_body_over_the_limit_is_counted_not_kept() {
        let answer = Answer::of(&response(200, &[], b"0123456789"), 9);
        assert_eq!(
            (answer.body.as_deref(), answer.body_base64.as_deref(), answer.body_size, answer.body_kept),
            (None, None, 10, false)
        );
        assert!(answer.json::<serde_json::Value>().unwrap_err().to_string().contains("10 bytes"));
        assert!(Answer::of(&response(200, &[], b"0123456789"), 10).body_kept);
    }

    #[test]
    fn an_answer_is_sealed_like_its_request_and_opens_only_with_the_key() {
        let key = IdempotencyKey::v5("order-1", "pay");
        let ring = |hex: &str| crate::SealKey::from_text(&hex.repeat(32)).unwrap();
        let system = |seal: crate::SealKey, all: bool| {
            HttpSystem::builder("pay", "http://127.0.0.1:1/")
                .seal_key(seal)
                .seal_answers(all)
                .build()
                .unwrap()
        };
        let pay = system(ring("4f"), false);
        let answer = response(201, &[("content-type", "application/json")], br#"{"card_token":"tok_1"}"#);
        let plain = crate::Request::post("payments/confirm");
        let with_token = crate::Request::post("payments").header("authorization", "Bearer s3cret").body("{}");

        let clear = pay.keep_answer_of(&key, &pay.capture(&key, &plain).unwrap(), &answer);
        assert!(
            clear.sealed.is_none() && clear.answer.is_some(),
            "nothing of the request sealed, its answer in clear"
        );

        let sealed_request = pay.capture(&key, &with_token).unwrap();
        let sealed = pay.keep_answer_of(&key, &sealed_request, &answer);
        assert!(sealed.answer.is_none(), "a sealed request's answer is sealed");
        assert!(!serde_json::to_string(&sealed).unwrap().contains("tok_1"));
        let opened = pay.open_answer(&key, &sealed_request, &sealed).unwrap().unwrap();
        assert_eq!(opened.body.as_deref(), Some(r#"{"card_token":"tok_1"}"#));
        let other = system(ring("5a"), false);
        assert!(other.open_answer(&key, &sealed_request, &sealed).is_err(), "another key does not open it");

        let all = system(ring("4f"), true);
        let plain_request = all.capture(&key, &plain).unwrap();
        assert!(
            all.keep_answer_of(&key, &plain_request, &answer).sealed.is_some(),
            "seal_answers seals every answer"
        );
    }

    #[test]
    fn a_result_of_before_answers_were_kept_still_reads() {
        let old: DeliveryResult = serde_json::from_str(r#"{"status":201}"#).unwrap();
        assert_eq!((old.status, old.answer, old.sealed), (201, None, None));
    }
}
