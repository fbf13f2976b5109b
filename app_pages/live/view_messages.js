// Listens, once per page and message, for what a view in an iframe posts to its parent: the head view's click on a
// query token ({attnlibPick: position}, attnlib/views/head_view.js) or a window dragged on the long view's map
// ({attnlibWindow: [first, last]}, attnlib/views/long_view.js), and hands its value to the page as the trigger value
// `data.trigger`. It draws nothing, and says so (`.attn-nothing-to-draw`) to whoever waits for the page's components
// to be drawn (the tests and the benchmarks).
export default function ({ parentElement, data, setTriggerValue }) {
  if (parentElement.querySelector(".attn-nothing-to-draw") === null) {
    const mark = document.createElement("span");
    mark.className = "attn-nothing-to-draw";
    mark.hidden = true;
    parentElement.appendChild(mark);
  }
  const listeners = (window.attnViewMessages ??= {});
  const known = data.message in listeners;
  listeners[data.message] = () => setTriggerValue; // the newest run's, so a message reaches the page as it is now
  if (known) return;
  window.addEventListener("message", (event) => {
    const value = event.data && event.data[data.message];
    if (value !== undefined && event.source !== window) listeners[data.message]()(data.trigger, value);
  });
}
