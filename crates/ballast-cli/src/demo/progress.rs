//! Progress bars while a client runs, drawn on stderr so the report on stdout
//! stays clean; indicatif hides them when stderr is not a terminal.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

const TEMPLATE: &str = "{prefix:>8} [{bar:40.cyan/blue}] {pos:>4}/{len} orders  {elapsed:>3}  {msg}";

/// A bar for `client` running `orders` orders.
pub fn client_bar(client: &'static str, orders: u32) -> ProgressBar {
    // The template is a constant; should indicatif ever reject it, a plain bar
    // is a fine fallback for a progress display.
    let style = ProgressStyle::with_template(TEMPLATE)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let bar = ProgressBar::new(u64::from(orders)).with_style(style).with_prefix(client);
    // Ticks keep the elapsed time and the message moving while the worker
    // drains the queue and no order completes.
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}
