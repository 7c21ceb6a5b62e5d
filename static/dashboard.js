// Draws the dashboard's plotly charts. The figures are plotly figure dicts built by portal.dashboards.charts and
// embedded in the live fragment with json_script; each chart element names its figure (data-chart). They are drawn
// when the page loads and again after each htmx swap of the fragment (every 30 s), which brings new figures and
// new, empty chart elements: Plotly.react draws into them.
(function () {
  function draw() {
    var source = document.getElementById("dashboard-figures");
    if (!source || typeof Plotly === "undefined") return;
    var figures = JSON.parse(source.textContent);
    document.querySelectorAll("#dashboard [data-chart]").forEach(function (element) {
      var figure = figures[element.getAttribute("data-chart")];
      if (figure) Plotly.react(element, figure.data, figure.layout, { responsive: true, displaylogo: false });
    });
  }
  document.addEventListener("DOMContentLoaded", draw);
  document.addEventListener("htmx:afterSwap", function (event) {
    if (event.target && event.target.id === "dashboard") draw();
  });
})();
