// Live progress of a rollout (Server-Sent Events): the server sends the progress section's
// new HTML, rendered and escaped on the server, each time it changes. Served from the package;
// no other script runs on these pages.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const target = document.getElementById("progress");
  if (!target || !target.dataset.live || !window.EventSource) return;
  const events = new EventSource(target.dataset.live);
  events.addEventListener("progress", (e) => { target.innerHTML = e.data; });
});
