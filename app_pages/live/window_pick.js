// Listens, once per page, for a window dragged on the long view's map: the view (attnlib/views/long_view.js) posts
// {attnlibWindow: [first, last]} (1-based, inclusive) to its parent, and this hands it to the page as the trigger
// value `window`. It draws nothing, and says so (`.attn-nothing-to-draw`) to whoever waits for the page's components.
export default function ({ parentElement, setTriggerValue }) {
  if (parentElement.querySelector(".attn-nothing-to-draw") === null) {
    const mark = document.createElement("span");
    mark.className = "attn-nothing-to-draw";
    mark.hidden = true;
    parentElement.appendChild(mark);
  }
  window.attnWindow = setTriggerValue; // the newest run's, so that a drag always reaches the page as it is now
  if (window.attnWindowListening) return;
  window.attnWindowListening = true;
  window.addEventListener("message", (event) => {
    const picked = event.data && event.data.attnlibWindow;
    if (Array.isArray(picked) && picked.length === 2 && event.source !== window) window.attnWindow("window", picked);
  });
}
