//! The side-by-side report: what the gateway's ledger says each client did.

use std::fmt;
use std::time::Duration;

use super::gateway::Totals;
use super::guarded::QueueTotals;
use super::workload::CALLS_PER_ORDER;

/// One client's results.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    /// The gateway's ledger for this client's run.
    pub totals: Totals,
    /// The durable queue's side; `None` for a client without one.
    pub queue: Option<QueueTotals>,
    /// From the first order to the last delivery.
    pub wall: Duration,
}

/// Both clients' results for the same orders and the same faults.
#[derive(Debug, Clone, Copy)]
pub struct Report {
    /// Orders per client.
    pub orders: u32,
    /// Orders the gateway accepts payment for (not declined with 422).
    pub payable: u64,
    /// The client that retries everything without a key.
    pub naive: Column,
    /// ballast.
    pub ballast: Column,
}

impl Report {
    fn rows(&self) -> Vec<(String, String, String)> {
        let (n, b) = (&self.naive, &self.ballast);
        let calls = u64::from(self.orders) * CALLS_PER_ORDER;
        let sent = |c: &Column| {
            let factor = c.totals.requests as f64 / calls.max(1) as f64;
            format!("{} ({factor:.2}x)", c.totals.requests)
        };
        let queue = |c: &Column, f: fn(&QueueTotals) -> u64| {
            c.queue.as_ref().map_or("-".into(), |q| f(q).to_string())
        };
        let both = |f: fn(&Column) -> String| (f(n), f(b));
        let mut rows = vec![
            ("orders".to_owned(), (self.orders.to_string(), self.orders.to_string())),
            (format!("requests sent (load factor, {calls} calls)"), (sent(n), sent(b))),
            ("double charges".into(), both(|c| c.totals.double_charges.to_string())),
            ("duplicate notifications".into(), both(|c| c.totals.duplicate_notifications.to_string())),
            ("4xx retried".into(), both(|c| c.totals.retried_4xx.to_string())),
            ("deferred to the queue".into(), (queue(n, |q| q.deferred), queue(b, |q| q.deferred))),
            (
                "delivered by the worker after the outage".into(),
                (queue(n, |q| q.delivered), queue(b, |q| q.delivered)),
            ),
            ("failed and alerted".into(), (queue(n, |q| q.alerted), queue(b, |q| q.alerted))),
            (
                format!("orders charged (of {} payable)", self.payable),
                both(|c| c.totals.orders_charged.to_string()),
            ),
            ("wall time".into(), both(|c| format!("{:.1} s", c.wall.as_secs_f64()))),
        ];
        if let Some(q) = b.queue.filter(|q| q.pending > 0) {
            rows.push((
                "still in the queue when the demo stopped".into(),
                ("-".into(), q.pending.to_string()),
            ));
        }
        rows.into_iter().map(|(label, (n, b))| (label, n, b)).collect()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows = self.rows();
        let label = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
        let (wn, wb) = rows.iter().fold((5, 7), |(a, b), r| (a.max(r.1.len()), b.max(r.2.len())));
        writeln!(f, "{:label$}  {:>wn$}  {:>wb$}", "", "naive", "ballast")?;
        for (l, n, b) in &rows {
            writeln!(f, "{l:label$}  {n:>wn$}  {b:>wb$}")?;
        }
        let (n, b) = (&self.naive.totals, &self.ballast.totals);
        writeln!(f)?;
        writeln!(f, "double charges: naive {}, ballast {}", n.double_charges, b.double_charges)?;
        writeln!(
            f,
            "duplicate notifications: naive {}, ballast {}",
            n.duplicate_notifications, b.duplicate_notifications
        )?;
        writeln!(f)?;
        let mut text = "Why they differ: on a 500 or a dropped connection the gateway may already have \
            charged the card and only the answer was lost. The naive client sent the payment again \
            without a key and charged again (R-RES-RE-X1), sent the profile update again so customers \
            got the notification twice, and repeated refusals that can never succeed (R-RES-RE-X2). \
            ballast retries only the read and the keyed payment, whose repeats the gateway answers from \
            its stored result (R-RES-RE-1); it sends the unkeyed profile update exactly once and reports \
            a lost answer instead of guessing. When the outage outlasted the in-memory window, its \
            breaker opened and it stopped sending, and it handed each payment to the durable queue with \
            the same key instead of holding the request open (R-RES-RE-4); the worker delivered them once \
            the gateway was back. The naive client kept hammering the gateway, gave up on its payments \
            and told nobody."
            .to_owned();
        if let Some(q) = self.ballast.queue.filter(|q| q.refused > 0) {
            text.push_str(&format!(
                " {} deferred payments were declined with 422 once the gateway answered: not retried, \
                 and a human is alerted (R-RES-RE-5).",
                q.refused
            ));
        }
        write_wrapped(f, &text, 88)
    }
}

fn write_wrapped(f: &mut fmt::Formatter<'_>, text: &str, width: usize) -> fmt::Result {
    let mut line = 0;
    for word in text.split_whitespace() {
        if line > 0 && line + 1 + word.len() > width {
            writeln!(f)?;
            line = 0;
        }
        if line > 0 {
            f.write_str(" ")?;
            line += 1;
        }
        f.write_str(word)?;
        line += word.len();
    }
    writeln!(f)
}
