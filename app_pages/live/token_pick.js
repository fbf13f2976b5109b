// Listens, once per page, for the head view's click on a query token: the view (attnlib/views/head_view.js) posts
// {attnlibPick: position} (1-based, 0 for none) to its parent when a token is pinned, and this hands it to the page
// as the trigger value `picked`. It draws nothing, and says so (`.attn-nothing-to-draw`) to whoever waits for the
// page's components to be drawn (the tests and the benchmarks).
export default function ({ parentElement, setTriggerValue }) {
  if (parentElement.querySelector(".attn-nothing-to-draw") === null) {
    const mark = document.createElement("span");
    mark.className = "attn-nothing-to-draw";
    mark.hidden = true;
    parentElement.appendChild(mark);
  }
  window.attnPick = setTriggerValue; // the newest run's, so that a click always reaches the page as it is now
  if (window.attnPickListening) return;
  window.attnPickListening = true;
  window.addEventListener("message", (event) => {
    const picked = event.data && event.data.attnlibPick;
    if (typeof picked === "number" && event.source !== window) window.attnPick("picked", picked);
  });
}
