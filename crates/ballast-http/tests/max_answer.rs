//! Every answer read whole is capped (`HttpSystemBuilder::max_answer`): a
//! 400 MB answer fails its attempt as sent, on ballast's transport and on a
//! caller's own reqwest client, told by its length or found chunked; a call
//! that takes a stream still streams it.

use ballast::IdempotencyKey;
use ballast_http::{HttpError, HttpSystem, Request, TransportKind};
use ballast_test_support::{Reply, Upstream};

const HUGE: u64 = 400_000_000;

fn too_large(failure: &ballast::Failure<HttpError>) -> bool {
    failure.error().and_then(HttpError::transport_kind) == Some(TransportKind::TooLarge)
}

#[tokio::test]
async fn an_answer_over_max_answer_fails_as_sent_and_is_not_retried() {
    let upstream =
        Upstream::start(
            |_, n| {
                if n % 2 == 1 {
                    Reply::large(201, HUGE)
                } else {
                    Reply::large(201, HUGE).chunked()
                }
            },
        )
        .await;
    let pay = HttpSystem::builder("pay", &upstream.url("/"))
        .dedupes_by_key(true)
        .max_answer(1 << 20)
        .build()
        .unwrap();
    let key = IdempotencyKey::v5("order-1", "pay");
    for _ in 0..2 {
        let failure = pay.write(&key, Request::post("payments")).await.unwrap_err();
        assert!(too_large(&failure), "{failure}");
        assert_eq!(failure.attempts(), 1, "the next answer would be as large: {failure}");
        assert!(!failure.error().unwrap().nothing_sent(), "the write was sent");
        assert!(failure.to_string().contains("max_answer"), "{failure}");
    }
    let read = pay.read(Request::get("reports")).await.unwrap_err();
    assert!(too_large(&read), "{read}");
    let streamed = pay.read(Request::get("reports").stream_answer_past(64 << 10)).await.unwrap();
    assert!(streamed.is_streamed(), "a call that takes a stream streams past its buffer");
}

#[tokio::test]
async fn a_callers_own_client_is_capped_too() {
    let upstream = Upstream::start(|_, _| Reply::large(200, HUGE).chunked()).await;
    let client = reqwest::Client::builder()
        .retry(reqwest::retry::never())
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let crm =
        HttpSystem::builder("crm", &upstream.url("/")).client(client).max_answer(1 << 20).build().unwrap();
    let failure = crm.read(Request::get("leads")).await.unwrap_err();
    assert!(too_large(&failure), "{failure}");
}
