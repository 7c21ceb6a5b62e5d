// Draws a what-if run's charts. The figures are plotly figure dicts the worker stored with the run (built by
// scheduling.sim.report's pure functions); the page embeds them with json_script. htmx.onLoad runs for the page
// and again for each fragment the status poll swaps in, so charts appear when a running replay finishes.
htmx.onLoad(function (root) {
  var source = root.querySelector ? root.querySelector("#whatif-figures") : null;
  var target = root.querySelector ? root.querySelector("[data-whatif-charts]") : null;
  if (!source || !target || typeof Plotly === "undefined") return;
  JSON.parse(source.textContent).forEach(function (figure) {
    var chart = document.createElement("div");
    chart.className = "chart";
    target.appendChild(chart);
    Plotly.newPlot(chart, figure.data, figure.layout, { responsive: true, displaylogo: false });
  });
});

// The form: guaranteed GPUs and the fair-share half-life are read by +quota policies alone (#18). While none is
// ticked they are hidden ([data-quota-only]) and a line says how to set them; one holding an error stays shown.
// Without this script everything stays shown, under the note that says which policies read what.
(function () {
  function sync(form) {
    var quota = form.querySelector('input[name="policies"][value$="+quota"]:checked') !== null;
    form.querySelectorAll("[data-quota-only]").forEach(function (element) {
      element.hidden = !quota && !element.querySelector(".error");
    });
    var note = form.querySelector("[data-quota-hidden-note]");
    if (note) note.hidden = quota;
  }
  document.addEventListener("DOMContentLoaded", function () {
    var form = document.querySelector("[data-testid=whatif-form]");
    if (!form) return;
    sync(form);
    form.addEventListener("change", function (event) {
      if (event.target && event.target.name === "policies") sync(form);
    });
  });
})();
