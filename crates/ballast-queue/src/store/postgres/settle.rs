//! Settling outcomes and claiming tasks in one round trip: the outcomes
//! written in id order, fenced by their leases; the follow-ups (an alert's
//! tasks) in the same transaction; the statement sent again when
//! PostgreSQL aborts it for a deadlock or a conflict.

use sqlx::postgres::PgConnection;
use sqlx::Row;
use uuid::Uuid;

use super::sql::*;
use super::{enqueue_one, PgStore};
use crate::error::Result;
use crate::outcome::Outcome;
use crate::store::{ClaimRequest, ClaimedTask, Exchange, Lease};
use crate::types::duration_micros;

pub(super) fn split(leases: &[Lease]) -> (Vec<i64>, Vec<Uuid>) {
    leases.iter().map(|l| (l.id, l.token)).unzip()
}

/// [`SETTLE_AND_CLAIM`] (as `sql`, its limit written in) on `conn`; wakes
/// other workers if it released tasks.
async fn settle_and_claim(
    conn: &mut PgConnection,
    sql: &str,
    outcomes: &[Outcome],
    claim: &ClaimRequest,
) -> Result<Exchange> {
    let n = outcomes.len();
    let (mut ids, mut tokens, mut codes) =
        (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut results, mut delays, mut errors, mut counted) =
        (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let mut payloads: Vec<Option<&str>> = Vec::with_capacity(n);
    // In id order, as every settle takes its rows (see SETTLE_AND_CLAIM).
    let mut sorted: Vec<&Outcome> = outcomes.iter().collect();
    sorted.sort_by_key(|o| o.lease().id);
    for outcome in sorted {
        let lease = outcome.lease();
        ids.push(lease.id);
        tokens.push(lease.token);
        codes.push(outcome.code());
        errors.push(outcome.error());
        let (result, delay, count) = match outcome {
            Outcome::Completed { result, .. } => (result.as_deref(), None, true),
            Outcome::Rescheduled { delay, counted, .. } => (None, Some(duration_micros(*delay)), *counted),
            Outcome::Failed { .. } | Outcome::Released { .. } => (None, None, true),
        };
        payloads.push(match outcome {
            Outcome::Rescheduled { payload, .. } => payload.as_deref(),
            _ => None,
        });
        results.push(result);
        delays.push(delay);
        counted.push(count);
    }
    let rows = sqlx::query(sql)
        .bind(&ids)
        .bind(&tokens)
        .bind(&codes)
        .bind(&results)
        .bind(&delays)
        .bind(&errors)
        .bind(&counted)
        .bind(&*claim.kinds)
        .bind(&*claim.owner)
        .bind(duration_micros(claim.lease))
        .bind(&payloads)
        .bind(&*claim.families)
        .fetch_all(&mut *conn)
        .await?;
    let mut exchange = Exchange::default();
    let mut settled = std::collections::HashSet::with_capacity(n);
    let mut sequences = Vec::new();
    for row in rows {
        if row.try_get::<bool, _>("claimed")? {
            exchange.claimed.push(ClaimedTask {
                lease: Lease { id: row.try_get("id")?, token: row.try_get("lease_token")? },
                kind: row.try_get("kind")?,
                payload: row.try_get("payload")?,
                key: row.try_get("idempotency_key")?,
                attempt: row.try_get("attempt")?,
                max_attempts: row.try_get("max_attempts")?,
                sequence: row.try_get("sequence")?,
            });
        } else {
            settled.insert(Lease { id: row.try_get("id")?, token: row.try_get("lease_token")? });
            sequences.extend(row.try_get::<Option<String>, _>("sequence")?);
        }
    }
    if !sequences.is_empty() {
        // The tasks held behind the completed ones go next.
        let released: i64 = sqlx::query_scalar(RELEASE_HELD).bind(&sequences).fetch_one(&mut *conn).await?;
        exchange.released = u64::try_from(released).unwrap_or_default();
    }
    if settled.len() != n {
        let unsettled: Vec<Lease> =
            outcomes.iter().map(Outcome::lease).filter(|l| !settled.contains(l)).collect();
        let (ids, tokens) = split(&unsettled);
        let written: Vec<(i64, Uuid)> =
            sqlx::query_as(WRITTEN).bind(&ids).bind(&tokens).fetch_all(&mut *conn).await?;
        exchange.refused = unsettled.into_iter().filter(|l| !written.contains(&(l.id, l.token))).collect();
    }
    let released =
        outcomes.iter().any(|o| matches!(o, Outcome::Released { lease } if settled.contains(lease)));
    if released {
        sqlx::query("SELECT pg_notify($1, '')").bind(CHANNEL).execute(&mut *conn).await?;
    }
    Ok(exchange)
}

impl PgStore {
    /// One settle-and-claim: in a transaction with the follow-ups when any
    /// outcome has some (a failure's alert tasks exist only if the failure
    /// was stored, by its own fenced write).
    async fn settle_and_claim_once(&self, outcomes: &[Outcome], claim: &ClaimRequest) -> Result<Exchange> {
        let sql = self.statements.settle_and_claim(claim.limit, claim.sweep);
        if outcomes.iter().all(|o| o.follow_ups().is_empty()) {
            let mut conn = self.pool.acquire().await?;
            return settle_and_claim(&mut conn, &sql, outcomes, claim).await;
        }
        let mut tx = self.pool.begin().await?;
        let exchange = settle_and_claim(&mut tx, &sql, outcomes, claim).await?;
        // An outcome written before (a lost answer) enqueued its follow-ups then.
        for outcome in outcomes.iter().filter(|o| !exchange.refused.contains(&o.lease())) {
            for task in outcome.follow_ups() {
                enqueue_one(&mut tx, task).await?;
            }
        }
        tx.commit().await?;
        Ok(exchange)
    }

    /// [`settle_and_claim_once`](Self::settle_and_claim_once), sent again
    /// (at most [`RETRIES`] times) when PostgreSQL aborts it for a deadlock
    /// or a serialization conflict.
    pub(super) async fn settle_and_claim_retried(
        &self,
        outcomes: &[Outcome],
        claim: &ClaimRequest,
    ) -> Result<Exchange> {
        super::retried("a settle and claim", || self.settle_and_claim_once(outcomes, claim)).await
    }
}
