//! Keyed writes in flight on one system, by key: the same request sent
//! again while the first is on its way (a double click, a caller's own
//! retry) joins it — one upstream call, and each caller gets its answer —
//! instead of reaching the system beside it, where it would meet a 409
//! "in flight"; another request under the same key is refused unsent
//! ([`HttpError::KeyReused`], R-RES-RE-1). Both only for the same caller
//! ([`crate::caller`]): another caller's request with the key is neither
//! joined nor refused, but goes its own way.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use tokio::sync::watch;

use crate::caller::Caller;
use crate::{Fingerprint, HttpError, Response};

/// The keys of one system's keyed writes in flight.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    flights: Mutex<HashMap<String, Flight>>,
    next: AtomicU64,
}

#[derive(Debug)]
struct Flight {
    id: u64,
    fingerprint: Fingerprint,
    caller: Caller,
    answer: watch::Receiver<Option<Response>>,
}

/// A keyed write's turn: to send it, or to wait for the same request's answer.
pub(crate) enum Turn<'a> {
    /// No request with this key is in flight: send it, then [`Lead::land`].
    Lead(Lead<'a>),
    /// The same request is in flight: its answer, once it has one to share.
    Join(watch::Receiver<Option<Response>>),
    /// Another caller's request with this key is in flight: send this one
    /// on its own, neither joined to it nor in its place.
    Alone,
}

/// The flight this call leads; leaves the table when dropped.
pub(crate) struct Lead<'a> {
    table: &'a InFlight,
    key: String,
    id: u64,
    answer: watch::Sender<Option<Response>>,
}

impl Lead<'_> {
    /// Hands `answer` to every caller that joined. Without one (no answer,
    /// or a failed one), each joined caller sends its request itself, one
    /// after another, so none meets another in flight.
    pub(crate) fn land(self, answer: Option<&Response>) {
        if let Some(answer) = answer {
            self.answer.send_replace(Some(answer.clone()));
        }
    }
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        let mut flights = self.table.flights.lock().unwrap_or_else(PoisonError::into_inner);
        if flights.get(&self.key).is_some_and(|f| f.id == self.id) {
            flights.remove(&self.key);
        }
    }
}

impl InFlight {
    /// The turn of `caller`'s write with `key` asking for `fingerprint`;
    /// refused when the same caller's other request with the same key is
    /// in flight.
    pub(crate) fn turn(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        caller: &Caller,
    ) -> Result<Turn<'_>, HttpError> {
        let mut flights = self.flights.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(flight) = flights.get(key) {
            if flight.caller != *caller {
                return Ok(Turn::Alone);
            }
            if flight.fingerprint != *fingerprint {
                return Err(HttpError::KeyReused { key: key.to_owned(), first_in: "in flight" });
            }
            return Ok(Turn::Join(flight.answer.clone()));
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (answer, receiver) = watch::channel(None);
        let flight =
            Flight { id, fingerprint: fingerprint.clone(), caller: caller.clone(), answer: receiver };
        flights.insert(key.to_owned(), flight);
        Ok(Turn::Lead(Lead { table: self, key: key.to_owned(), id, answer }))
    }

    /// How many keyed writes are in flight.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.flights.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

/// The answer a joined call gets: the first request's, or `None` when it
/// ended without one to share (the joined call then sends its own).
pub(crate) async fn joined(mut answer: watch::Receiver<Option<Response>>) -> Option<Response> {
    answer.wait_for(Option::is_some).await.ok().and_then(|answer| answer.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Request;

    fn fp(body: &'static str) -> Fingerprint {
        Fingerprint::of(&Request::post("payments").body(body))
    }

    fn caller(token: &'static str) -> Caller {
        let names = [http::header::AUTHORIZATION];
        Caller::of(&Request::post("payments").header("authorization", token), &names)
    }

    /// The turn of caller A.
    fn turn<'a>(table: &'a InFlight, key: &str, fingerprint: &Fingerprint) -> Result<Turn<'a>, HttpError> {
        table.turn(key, fingerprint, &caller("a"))
    }

    #[test]
    fn another_caller_s_request_with_the_key_goes_its_own_way() {
        let table = InFlight::default();
        let Ok(Turn::Lead(_lead)) = turn(&table, "k1", &fp("a")) else { panic!("the first leads") };
        assert!(matches!(table.turn("k1", &fp("a"), &caller("b")), Ok(Turn::Alone)), "not joined");
        assert!(matches!(table.turn("k1", &fp("b"), &caller("b")), Ok(Turn::Alone)), "not refused either");
    }

    #[tokio::test]
    async fn the_same_request_joins_another_is_refused_and_the_table_empties() {
        let table = InFlight::default();
        let Ok(Turn::Lead(lead)) = turn(&table, "k1", &fp("a")) else { panic!("the first leads") };
        let Ok(Turn::Join(waiting)) = turn(&table, "k1", &fp("a")) else { panic!("the same request joins") };
        let refused = turn(&table, "k1", &fp("b")).err().expect("another request under the key");
        assert!(refused.to_string().contains("R-RES-RE-1"), "{refused}");
        assert!(matches!(turn(&table, "k2", &fp("b")), Ok(Turn::Lead(_))), "another key is its own flight");
        let answer = Response {
            status: http::StatusCode::CREATED,
            headers: http::HeaderMap::new(),
            body: bytes::Bytes::from_static(b"paid"),
            attempts: 1,
            verdict: None,
            rest: None,
        };
        let joined = tokio::spawn(joined(waiting));
        lead.land(Some(&answer));
        let got = joined.await.unwrap().expect("the first request's answer");
        assert_eq!((got.status().as_u16(), got.text().as_ref()), (201, "paid"));
        assert_eq!(table.len(), 0, "a landed flight leaves the table");
    }

    #[tokio::test]
    async fn a_flight_without_an_answer_lets_the_joined_call_send_its_own() {
        let table = InFlight::default();
        let Ok(Turn::Lead(lead)) = turn(&table, "k1", &fp("a")) else { panic!("the first leads") };
        let Ok(Turn::Join(waiting)) = turn(&table, "k1", &fp("a")) else { panic!("joins") };
        lead.land(None);
        assert!(joined(waiting).await.is_none());
        assert!(matches!(turn(&table, "k1", &fp("a")), Ok(Turn::Lead(_))));
    }
}
