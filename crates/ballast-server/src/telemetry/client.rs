//! The exporter's HTTP client: hyper-util's pooled HTTP/1.1 client over
//! hyper-rustls, the stack the systems' own transport is built on, so the
//! exporter adds no second client (and no HTTP/2) to the build.

use std::time::Duration;

use async_trait::async_trait;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// The largest answer read from a collector: its body is a small protobuf
/// (partial success at most), so anything bigger is not a collector's.
const MAX_ANSWER: usize = 64 * 1024;

/// Posts exports to the collector, each bounded by the timeout.
#[derive(Debug, Clone)]
pub(crate) struct CollectorClient {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
}

impl CollectorClient {
    /// A client for `http://` and `https://` collectors (Mozilla's roots).
    pub(crate) fn new(timeout: Duration) -> Self {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
        Self { client, timeout }
    }
}

#[async_trait]
impl HttpClient for CollectorClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let request = Request::from_parts(parts, Full::new(body));
        let answer = async {
            let response = self.client.request(request).await?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_ANSWER).collect().await?.to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        };
        tokio::time::timeout(self.timeout, answer)
            .await
            .map_err(|_| format!("the collector did not answer within {:?}", self.timeout))?
    }
}
