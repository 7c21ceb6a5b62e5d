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
