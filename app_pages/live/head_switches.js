// The model view (attnlib/views/model_view.js) in switches mode, in an iframe of the app's own page: a click on a
// thumbnail there posts {attnHeadsOff: [[layer, head], ...]} (0-based) to this page, which becomes the component's
// state value `off`, so Streamlit reruns the page with those heads switched off. The iframe takes its content's height.
export default function ({ parentElement, data, setStateValue }) {
  let frame = parentElement.querySelector("iframe.attn-switches");
  if (frame === null) {
    frame = document.createElement("iframe");
    frame.className = "attn-switches";
    frame.title = "Model view: click a head to switch it off";
    frame.style.width = "100%";
    frame.style.border = "0";
    frame.addEventListener("load", () => {
      const page = frame.contentDocument?.documentElement;
      if (page) frame.style.height = `${page.scrollHeight + 8}px`;
    });
    window.addEventListener("message", (event) => {
      if (event.source === frame.contentWindow && Array.isArray(event.data?.attnHeadsOff)) {
        frame.report(event.data.attnHeadsOff);
      }
    });
    parentElement.appendChild(frame);
  }
  frame.report = (heads) => setStateValue("off", heads); // the newest render's setter
  if (frame.srcdoc !== data.html) frame.srcdoc = data.html;
}
