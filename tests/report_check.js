// Appended to a run report by tests/report_browser.sh and run by Chromium after layout: checks
// that every chart was laid out and that the charts in `expected` drew marks, the others said
// "no data". Its verdict goes into a paragraph with the id "verdict", which --dump-dom prints.
(function () {
  const problems = [];
  const figures = Array.from(document.querySelectorAll("figure.chart"));
  if (figures.length !== 10) problems.push(`${figures.length} charts, expected 10`);
  let marks = 0;
  for (const f of figures) {
    const svg = f.querySelector("svg");
    const box = svg ? svg.getBoundingClientRect() : { width: 0, height: 0 };
    if (box.width < 200 || box.height < 80) {
      problems.push(`${f.id} laid out at ${box.width}x${box.height}`);
      continue;
    }
    let drawn = 0;
    for (const p of f.querySelectorAll("path.line")) {
      if (p.getAttribute("d") && p.getTotalLength() > 0) drawn++;
    }
    for (const c of f.querySelectorAll("circle")) {
      if (c.getBBox().width > 0) drawn++;
    }
    for (const r of f.querySelectorAll("rect")) {
      if (!r.closest("g.legend") && r.getBBox().width > 0 && r.getAttribute("width") !== "10") drawn++;
    }
    const empty = f.querySelector("text.empty") !== null;
    const want = expected.includes(f.id);
    if (want && (drawn === 0 || empty)) problems.push(`${f.id} drew nothing`);
    if (!want && !empty) problems.push(`${f.id} has no "no data" note`);
    const stroke = f.querySelector("path.line") &&
        getComputedStyle(f.querySelector("path.line")).stroke;
    if (want && f.querySelector("path.line") && (!stroke || stroke === "none")) {
      problems.push(`${f.id} lines have no stroke colour`);
    }
    marks += drawn;
  }
  const verdict = document.createElement("p");
  verdict.id = "verdict";
  verdict.textContent = problems.length === 0
      ? `ok: ${figures.length} charts laid out, ${marks} marks drawn`
      : `FAILED: ${problems.join("; ")}`;
  document.body.appendChild(verdict);
})();
