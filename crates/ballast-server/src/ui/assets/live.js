// Keeps the overview's counts current: every few seconds, the live part of
// the page is fetched again and swapped in. Without JavaScript the page is
// the same, as of its loading.
(function () {
  const live = document.getElementById("live");
  if (!live) return;
  const every = 3000;
  async function refresh() {
    try {
      const response = await fetch("/ui/live", { credentials: "same-origin" });
      if (response.ok) {
        live.innerHTML = await response.text();
        live.dataset.refreshed = String(Date.now());
      }
    } catch (_) {
      // The next round tries again; the page keeps what it shows.
    }
    setTimeout(refresh, every);
  }
  setTimeout(refresh, every);
})();
