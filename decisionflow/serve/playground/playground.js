// decisionflow playground: decides with the server's own routes and shows each field's answer.
// No dependencies, no build step. Every text from the server or from the person is written with
// textContent (never parsed as HTML); the API key lives in the key field only, never stored.
"use strict";

(function () {
  const EXAMPLE_RUBRIC = [
    "name: tickets",
    "instructions: Triage one short customer message.",
    "fields:",
    "  refund:",
    "    kind: boolean",
    "    question: Whether the customer asks for money back",
    "  team:",
    "    kind: choice",
    "    question: Which team handles it",
    "    options:",
    "      billing: charges and invoices",
    "      shipping: delivery and parcels",
    "      technical: logins, errors and outages",
    "  urgency:",
    "    kind: score",
    "    question: How urgent it is, 0 (can wait) to 3 (right now)",
    "    min: 0",
    "    max: 3",
    "",
  ].join("\n");
  const INLINE_ROUTE = "/v1/rubrics/decide";
  const VALIDATE_ROUTE = "/v1/rubrics/validate";
  const CHECK_DELAY_MS = 400; // the YAML is checked once typing pauses this long
  const SVG = "http://www.w3.org/2000/svg"; // the SVG namespace's name (nothing is fetched from it)
  // The only attributes the charts set: geometry, class, accessible names. Never a handler, never a link.
  const SVG_ATTRIBUTES = new Set(["width", "height", "viewBox", "role", "aria-label", "class", "x", "y", "x1", "y1",
                                  "x2", "y2", "d", "points", "cx", "cy", "r", "rx"]);
  // How a field was read, by the `method` its answer carries (runtime.result.FITTED_METHODS answer by a fitted head).
  const FITTED_READOUTS = { fitted: "fitted head", ngram: "fitted head (on the words)", fused: "fitted head (fused)" };

  const $ = (id) => document.getElementById(id);
  let served = []; // what GET /v1/rubrics listed
  let running = false;
  let baselineYaml = EXAMPLE_RUBRIC; // the "before" of Compare: the YAML as it was last loaded
  let baselineName = ""; // ... decided by name (already prepared, its calibration and heads applied) when it was a served rubric's
  const checked = new Map(); // POST /v1/rubrics/validate's answers, by "name:" or "yaml:" key (the last few)
  let checkTimer = null;

  // -- building elements (text only) ----------------------------------------------------------

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function percent(p) {
    return (100 * p).toFixed(1) + "%";
  }

  function counted(number, what) {
    return number + " " + what + (number === 1 ? "" : what.endsWith("s") ? "es" : "s");
  }

  function shown(value) {
    if (value === null || value === undefined) return "none";
    if (typeof value === "object") return JSON.stringify(value);
    return String(value);
  }

  // -- the request --------------------------------------------------------------------------------

  function headers(withKey) {
    const sent = { "Content-Type": "application/json" };
    const key = $("api-key").value.trim();
    if (withKey && key) sent["Authorization"] = "Bearer " + key;
    return sent;
  }

  function currentRequest() {
    const name = $("rubric-choice").value;
    const text = $("input-text").value;
    if (name) {
      return { path: "/v1/rubrics/" + encodeURIComponent(name) + "/decide", body: { text: text }, rubric: name };
    }
    return { path: INLINE_ROUTE, body: { rubric: $("rubric-yaml").value, text: text }, rubric: "YAML rubric" };
  }

  function shellQuoted(text) {
    return "'" + text.replace(/'/g, "'\\''") + "'";
  }

  function curlOf(request) {
    const parts = ["curl -s " + shellQuoted(window.location.origin + request.path),
                   "-H 'Content-Type: application/json'"];
    if ($("api-key").value.trim()) parts.push("-H \"Authorization: Bearer $DECISIONFLOW_API_KEY\"");
    parts.push("-d " + shellQuoted(JSON.stringify(request.body)));
    return parts.join(" \\\n  ");
  }

  async function readReply(response) {
    const raw = await response.text();
    try {
      return JSON.parse(raw);
    } catch (_) {
      return raw;
    }
  }

  // -- showing refusals ------------------------------------------------------------------------

  function showError(status, body) {
    $("results").hidden = true;
    const box = $("error");
    const problems = $("error-problems");
    clear(problems);
    const error = body && typeof body === "object" ? body.error : null;
    if (error && typeof error === "object") {
      const where = error.field ? " at " + error.field : "";
      const kind = error.type || error.code || "error";
      $("error-summary").textContent = (status ? status + " " : "") + kind + where + ": " + shown(error.message);
      for (const problem of error.problems || []) {
        problems.appendChild(el("li", null, (problem.field ? problem.field + ": " : "") + shown(problem.message)));
      }
    } else {
      const text = typeof body === "string" ? body.slice(0, 2000) : shown(body);
      $("error-summary").textContent = (status ? status + ": " : "") + text;
    }
    box.hidden = false;
  }

  function hideError() {
    $("error").hidden = true;
    $("error-summary").textContent = "";
    clear($("error-problems"));
  }

  // -- showing answers ---------------------------------------------------------------------------

  function fact(list, term, value) {
    list.appendChild(el("dt", null, term));
    const detail = el("dd", null, value);
    detail.dataset.fact = term;
    list.appendChild(detail);
  }

  // How the field was read: the readout that answered (its `method`), then what the server applies to it
  // (`readout` of POST /v1/rubrics/validate: its calibration when decided by name, the adapter merged into the model).
  function readoutOf(name, result, readout) {
    if (result.asked === false) return "not asked";
    const parts = [FITTED_READOUTS[result.method] || (result.method === "derived" ? "derived" : "zero-shot")];
    if (readout && (readout.calibrated || []).includes(name)) parts.push("calibrated");
    if (readout && readout.adapter) parts.push("adapter");
    return parts.join(" + ");
  }

  // What the field waits for, as the plan says: `after` dependencies, and the condition it is asked under.
  function dependenciesOf(field) {
    if (!field) return "n/a";
    const parts = [];
    for (const dependency of field.depends_on || []) {
      if (field.when && field.when.field === dependency) {
        parts.push("when " + dependency + " is " + field.when.values.map(shown).join(" or "));
      } else if (field.derived && (field.derived.reads || []).includes(dependency)) {
        parts.push("computed from " + dependency);
      } else {
        parts.push("after " + dependency);
      }
    }
    return parts.join("; ") || "none";
  }

  function renderField(name, result, plan) {
    const section = el("section", "field");
    section.dataset.field = name;
    section.appendChild(el("h3", null, name));
    const answer = el("p", "answer");
    answer.appendChild(el("span", "answer-label", "Answer: "));
    const value = el("strong", "value", result.asked === false ? "not asked" : shown(result.value));
    value.dataset.value = JSON.stringify(result.value === undefined ? null : result.value);
    answer.appendChild(value);
    section.appendChild(answer);

    const ranked = Object.entries(result.probabilities || {}).sort((a, b) => b[1] - a[1]);
    const facts = el("dl", "facts");
    if (result.asked === false) {
      fact(facts, "why", shown(result.reason));
    } else {
      if (ranked.length) fact(facts, "probability", percent(ranked[0][1]));
      fact(facts, "runner-up", ranked.length > 1 ? ranked[1][0] + " (" + percent(ranked[1][1]) + ")" : "none");
      fact(facts, "candidate mass", result.candidate_mass === null || result.candidate_mass === undefined
        ? "n/a" : result.candidate_mass.toFixed(3));
      if (typeof result.expected_value === "number") fact(facts, "expected value", result.expected_value.toFixed(2));
      if (result.abstained) fact(facts, "abstained", "yes");
    }
    fact(facts, "round", result.round === null || result.round === undefined ? "n/a" : String(result.round));
    if (plan) fact(facts, "depends on", dependenciesOf((plan.fields || []).find((field) => field.name === name)));
    fact(facts, "readout", readoutOf(name, result, plan && plan.readout));
    fact(facts, "method", shown(result.method));
    section.appendChild(facts);

    if (Object.keys(result.probabilities || {}).length) {
      const bars = el("ul", "bars");
      bars.setAttribute("aria-label", name + ": probability of each answer");
      for (const [label, p] of Object.entries(result.probabilities)) {
        const item = el("li", "bar");
        item.dataset.option = label;
        if (label === shown(result.value)) item.classList.add("chosen");
        item.appendChild(el("span", "bar-label", label));
        const track = el("span", "bar-track");
        track.setAttribute("aria-hidden", "true");
        const fill = el("span", "bar-fill");
        fill.style.width = Math.max(0, Math.min(100, 100 * p)).toFixed(2) + "%";
        track.appendChild(fill);
        item.appendChild(track);
        const figure = el("span", "bar-value", percent(p));
        figure.dataset.probability = String(p);
        item.appendChild(figure);
        bars.appendChild(item);
      }
      section.appendChild(bars);
    }
    return section;
  }

  function showAnswers(request, body, elapsedMs, plan) {
    hideError();
    const fields = $("fields");
    clear(fields);
    const results = body.fields || {};
    for (const name of Object.keys(results)) fields.appendChild(renderField(name, results[name], plan));
    const stats = body.stats || {};
    const parts = [request.rubric, counted(Object.keys(results).length, "field"), Math.round(elapsedMs) + " ms"];
    if (typeof stats.forward_passes === "number") parts.push(counted(stats.forward_passes, "forward pass"));
    if (typeof stats.input_tokens === "number") parts.push(counted(stats.input_tokens, "input token"));
    if (plan && plan.readout) parts.push(plan.readout.by === "name" ? "as served" : "zero-shot");
    if (plan && plan.readout && plan.readout.adapter) parts.push("adapter " + shown(plan.readout.adapter.file));
    $("results-summary").textContent = parts.join(" · ");
    $("results-summary").dataset.elapsedMs = String(Math.round(elapsedMs));
    fillFields(results);
    $("results").hidden = false;
  }


  // -- calls of the other routes ---------------------------------------------------------------

  async function call(path, body) {
    const began = performance.now();
    const response = await fetch(path, {
      method: body === undefined ? "GET" : "POST", headers: headers(true), credentials: "omit",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const reply = await readReply(response);
    return { ok: response.ok && reply && typeof reply === "object", status: response.status, body: reply,
             elapsed: performance.now() - began };
  }

  async function guarded(what, work) {
    if (running) return;
    running = true;
    $("status").textContent = what + "…";
    try {
      await work();
    } catch (failure) {
      showError(null, "could not reach the server: " + shown(failure && failure.message));
      $("status").textContent = "No answer.";
    } finally {
      running = false;
    }
  }

  function refused(reply) {
    showError(reply.status, reply.body);
    $("status").textContent = "Refused (" + reply.status + ").";
  }

  // The rubric's YAML: the editor's, or the served rubric's (GET /v1/rubrics/{name}/yaml). Null when refused.
  async function rubricYaml() {
    const name = $("rubric-choice").value;
    if (!name) return $("rubric-yaml").value;
    const reply = await call("/v1/rubrics/" + encodeURIComponent(name) + "/yaml");
    if (!reply.ok) {
      refused(reply);
      return null;
    }
    return reply.body.yaml;
  }

  async function loadYaml() {
    const name = $("rubric-choice").value;
    if (!name) {
      $("status").textContent = "Choose a served rubric to edit its YAML.";
      return;
    }
    await guarded("Loading " + name + "'s YAML", async () => {
      const reply = await call("/v1/rubrics/" + encodeURIComponent(name) + "/yaml");
      if (!reply.ok) return refused(reply);
      hideError();
      $("rubric-yaml").value = reply.body.yaml;
      baselineYaml = reply.body.yaml;
      baselineName = name;
      $("rubric-choice").value = "";
      describeChoice();
      checkEditor();
      $("status").textContent = "Loaded " + name + "'s YAML into the editor: Run sends it inline (zero-shot); Compare runs it against your edits.";
    });
  }

  // -- checking as you type, and the plan ------------------------------------------------------------

  // POST /v1/rubrics/validate for a served rubric (`name`) or YAML: the reply, kept for the next asks of the same.
  async function validated(name, yaml) {
    const key = name ? "name:" + name : "yaml:" + yaml;
    if (checked.has(key)) return checked.get(key);
    const reply = await call(VALIDATE_ROUTE, name ? { name: name } : { rubric: yaml });
    if (reply.ok) {
      checked.set(key, reply);
      while (checked.size > 8) checked.delete(checked.keys().next().value);
    }
    return reply;
  }

  // The plan and readout of the rubric a request decides (null when it cannot be had).
  async function planOf(request) {
    try {
      const reply = request.path === INLINE_ROUTE ? await validated("", request.body.rubric) : await validated(request.rubric, "");
      return reply.ok ? reply.body : null;
    } catch (_) {
      return null;
    }
  }

  function showCheck(reply) {
    const summary = $("yaml-check-summary");
    const problems = $("yaml-check-problems");
    clear(problems);
    summary.className = reply.ok ? "valid" : "invalid";
    if (reply.ok) {
      summary.textContent = reply.body.summary;
      return;
    }
    const error = reply.body && typeof reply.body === "object" ? reply.body.error : null;
    if (reply.status === 422 && error && error.type === "RubricError") {
      summary.textContent = "not valid: " + counted((error.problems || []).length || 1, "problem");
      const listed = error.problems && error.problems.length ? error.problems : [error];
      for (const problem of listed) {
        problems.appendChild(el("li", null, (problem.field ? problem.field + ": " : "") + shown(problem.message)));
      }
    } else if (reply.status === 401) {
      summary.textContent = "not checked: the server asks for an API key";
    } else {
      const where = error && error.field ? " at " + error.field : "";
      summary.textContent = "not checked: " + reply.status + (error ? " " + (error.type || "error") + where + ": " + shown(error.message) : "");
    }
  }

  // Check the editor's YAML (once typing pauses): its located problems, or "valid: ..." and its plan drawn.
  async function checkEditor() {
    const yaml = $("rubric-yaml").value;
    let reply;
    try {
      reply = await validated("", yaml);
    } catch (failure) {
      reply = { ok: false, status: 0, body: "could not reach the server: " + shown(failure && failure.message) };
    }
    if ($("rubric-yaml").value !== yaml) return; // edited since: a newer check follows
    showCheck(reply);
    if (!$("rubric-choice").value) {
      if (reply.ok) drawPlan(reply.body, "the YAML rubric");
      else $("plan-view").hidden = true;
    }
  }

  function checkSoon() {
    clearTimeout(checkTimer);
    checkTimer = setTimeout(checkEditor, CHECK_DELAY_MS);
  }

  // The plan of the chosen rubric: a served one by name, else the editor's YAML.
  async function showChosenPlan() {
    const name = $("rubric-choice").value;
    if (!name) return checkEditor();
    try {
      const reply = await validated(name, "");
      if (reply.ok && $("rubric-choice").value === name) drawPlan(reply.body, name);
    } catch (_) {
      // the list said it is served; a plan that cannot be had leaves the last one drawn
    }
  }

  function dependencyCount(number) {
    return number + (number === 1 ? " dependency" : " dependencies");
  }

  // Arrowhead at (x2, y2) of a line from (x1, y1): a small triangle along the line.
  function arrowhead(x1, y1, x2, y2) {
    const length = Math.hypot(x2 - x1, y2 - y1) || 1;
    const ux = (x2 - x1) / length;
    const uy = (y2 - y1) / length;
    const size = 7;
    const bx = x2 - ux * size;
    const by = y2 - uy * size;
    return [[x2, y2], [bx - uy * size / 2, by + ux * size / 2], [bx + uy * size / 2, by - ux * size / 2]]
      .map((point) => point[0].toFixed(1) + "," + point[1].toFixed(1)).join(" ");
  }

  // The plan as columns of boxes (one column per round, derived fields last) and an arrow per dependency.
  function drawPlan(body, label) {
    const fields = body.fields || [];
    const rounds = (body.plan && body.plan.rounds) || [];
    const columns = rounds.map((round) => ({ title: "round " + round.index + (round.pinned ? " (pinned)" : ""), names: round.fields }));
    const derived = fields.filter((field) => field.round === null || field.round === undefined).map((field) => field.name);
    if (derived.length) columns.push({ title: "derived", names: derived });
    const longest = Math.max(8, ...fields.map((field) => field.name.length));
    const boxWidth = Math.max(150, Math.min(320, 16 + 7.3 * longest)); // a column title ("round 0 (pinned)") fits too
    const boxHeight = 24;
    const rowGap = 8;
    const columnGap = 64;
    const top = 30;
    const tallest = Math.max(1, ...columns.map((column) => column.names.length));
    const width = 10 + columns.length * boxWidth + (columns.length - 1) * columnGap + 10;
    const height = top + tallest * (boxHeight + rowGap) + 4;
    const where = {};
    columns.forEach((column, c) => column.names.forEach((name, r) => {
      where[name] = { x: 10 + c * (boxWidth + columnGap), y: top + r * (boxHeight + rowGap), column: c };
    }));
    const edges = [];
    for (const field of fields) {
      for (const dependency of field.depends_on || []) {
        if (where[dependency] && where[field.name]) {
          edges.push({ from: dependency, to: field.name, when: !!(field.when && field.when.field === dependency) });
        }
      }
    }
    const svg = svgNode("svg", { width: width, height: height, viewBox: "0 0 " + width + " " + height, role: "img", class: "plan",
      "aria-label": "The plan of " + label + ": " + counted(rounds.length, "round") + ", " + counted(fields.length, "field") + ", " +
        dependencyCount(edges.length) + ". " + columns.map((column) => column.title + ": " + column.names.join(", ")).join("; ") + "." });
    columns.forEach((column, c) => {
      svg.appendChild(svgNode("text", { x: 10 + c * (boxWidth + columnGap) + boxWidth / 2, y: 16, class: "column" }, column.title));
    });
    for (const edge of edges) {
      const a = where[edge.from];
      const b = where[edge.to];
      const forward = b.column > a.column;
      const x1 = forward ? a.x + boxWidth : a.x;
      const x2 = forward ? b.x : b.x + boxWidth;
      const y1 = a.y + boxHeight / 2;
      const y2 = b.y + boxHeight / 2;
      const group = svgNode("g", { class: "edge " + (edge.when ? "when" : "after") });
      group.appendChild(svgNode("title", {}, edge.from + " \u2192 " + edge.to + (edge.when ? " (when)" : " (after)")));
      group.appendChild(svgNode("line", { x1: x1, y1: y1, x2: x2, y2: y2 }));
      group.appendChild(svgNode("polygon", { points: arrowhead(x1, y1, x2, y2) }));
      svg.appendChild(group);
    }
    for (const field of fields) {
      const at = where[field.name];
      if (!at) continue;
      const group = svgNode("g", { class: "box " + field.kind });
      group.appendChild(svgNode("title", {}, field.name + " (" + field.kind + "): " + shown(field.question) + " \u2014 depends on " + dependenciesOf(field)));
      group.appendChild(svgNode("rect", { x: at.x, y: at.y, width: boxWidth, height: boxHeight, rx: 4 }));
      group.appendChild(svgNode("text", { x: at.x + 8, y: at.y + 16 }, field.name));
      svg.appendChild(group);
    }
    const graph = $("plan-graph");
    clear(graph);
    graph.appendChild(svg);
    $("plan-summary").textContent = label + ": " + body.summary + " (" + dependencyCount(edges.length) + ")";
    $("plan-view").hidden = false;
  }

  // -- compare -----------------------------------------------------------------------------------

  function topOf(result) {
    if (!result) return null;
    const probabilities = result.probabilities || {};
    return { value: result.asked === false ? "not asked" : shown(result.value), probabilities: probabilities,
             p: probabilities[shown(result.value)] };
  }

  function cell(row, text, className) {
    const td = el("td", className || null, text);
    row.appendChild(td);
    return td;
  }

  function showComparison(before, after, threshold) {
    const body = $("compare-table").tBodies[0];
    clear(body);
    const names = Object.keys(before.fields || {});
    for (const name of Object.keys(after.fields || {})) if (!names.includes(name)) names.push(name);
    let changed = 0;
    let moved = 0;
    for (const name of names) {
      const a = topOf((before.fields || {})[name]);
      const b = topOf((after.fields || {})[name]);
      const row = el("tr");
      row.dataset.field = name;
      cell(row, name);
      cell(row, a ? a.value + (a.p === undefined ? "" : " (" + percent(a.p) + ")") : "absent", "before");
      cell(row, b ? b.value + (b.p === undefined ? "" : " (" + percent(b.p) + ")") : "absent", "after");
      let delta = null;
      if (a && b && a.p !== undefined && b.probabilities[a.value] !== undefined) delta = b.probabilities[a.value] - a.p;
      const movedBy = cell(row, delta === null ? "n/a" : (delta >= 0 ? "+" : "") + (100 * delta).toFixed(1) + " pts",
                           "number moved-by");
      movedBy.dataset.delta = delta === null ? "" : String(delta);
      const notes = [];
      if (!a || !b) notes.push(!a ? "only after" : "only before");
      else if (a.value !== b.value) notes.push("answer changed");
      if (delta !== null && Math.abs(delta) > threshold) notes.push("moved > " + percent(threshold));
      if (notes.includes("answer changed") || !a || !b) {
        row.classList.add("changed");
        changed += 1;
      }
      if (delta !== null && Math.abs(delta) > threshold) {
        row.classList.add("moved");
        moved += 1;
      }
      cell(row, notes.join("; ") || "same", "difference");
      body.appendChild(row);
    }
    $("compare-summary").textContent = counted(names.length, "field") + " · " + counted(changed, "answer") + " changed · " +
      moved + " moved by more than " + percent(threshold);
    $("compare-view").hidden = false;
  }

  function compare() {
    return guarded("Comparing the YAML as loaded with the edited YAML", async () => {
      const text = $("input-text").value;
      const threshold = Number($("compare-threshold").value) || 0;
      const before = baselineName
        ? await call("/v1/rubrics/" + encodeURIComponent(baselineName) + "/decide", { text: text })
        : await call(INLINE_ROUTE, { rubric: baselineYaml, text: text });
      if (!before.ok) return refused(before);
      const after = await call(INLINE_ROUTE, { rubric: $("rubric-yaml").value, text: text });
      if (!after.ok) return refused(after);
      hideError();
      showComparison(before.body, after.body, threshold);
      $("compare-summary").textContent = "Before: " + (baselineName ? baselineName + " as served" : "the YAML as loaded") +
        "; after: the edited YAML (zero-shot). " + $("compare-summary").textContent;
      fillFields(after.body.fields || {});
      $("status").textContent = "Compared in " + Math.round(before.elapsed + after.elapsed) + " ms.";
    });
  }

  // -- coherence ---------------------------------------------------------------------------------

  function fillFields(fields) {
    const choice = $("coherence-field");
    const kept = choice.value;
    clear(choice);
    for (const name of Object.keys(fields)) {
      const option = el("option", null, name);
      option.value = name;
      choice.appendChild(option);
    }
    if (Object.keys(fields).includes(kept)) choice.value = kept;
  }

  function gapText(gap) {
    return gap === null || gap === undefined ? "n/a" : gap.toFixed(3);
  }

  function showCoherence(body) {
    const rows = $("coherence-table").tBodies[0];
    clear(rows);
    for (const check of body.checks || []) {
      const row = el("tr");
      row.dataset.check = check.check;
      cell(row, check.check);
      let variant = check.variant;
      if (check.order) variant += ": " + check.order.join(", ");
      if (check.question) variant += ": \u201c" + check.question + "\u201d";
      cell(row, variant);
      let answer = check.asked === false ? "not asked" : shown(check.value);
      if (check.check === "negation") answer += " (P(yes) " + (check.p_true_negated === null ? "n/a" : percent(check.p_true_negated)) + ")";
      else if (typeof check.answer_probability === "number") answer += " (P(" + shown(body.value) + ") " + percent(check.answer_probability) + ")";
      cell(row, answer);
      const consistent = check.consistent === null || check.consistent === undefined ? "n/a" : check.consistent ? "yes" : "no";
      cell(row, check.check === "negation" ? consistent + " (the answer flips)" : consistent + (check.check === "order" ? " (follows its option)" : " (same answer)"));
      const gap = cell(row, gapText(check.gap), "number gap");
      gap.dataset.gap = check.gap === null || check.gap === undefined ? "" : String(check.gap);
      if (check.consistent === false) row.classList.add("inconsistent");
      rows.appendChild(row);
    }
    const p = typeof body.answer_probability === "number" ? " (" + percent(body.answer_probability) + ")" : "";
    $("coherence-summary").textContent = body.field + " (" + body.kind + ") in the rubric as written: " +
      (body.asked === false ? "not asked" : shown(body.value)) + p + ". The gap of an order or alone check is the largest move of any answer's probability; of the negation, |P(yes) \u2212 (1 \u2212 P(yes to the negation))|.";
    $("coherence-view").hidden = false;
  }

  function checkCoherence() {
    const field = $("coherence-field").value;
    if (!field) {
      $("status").textContent = "Run or compare first: the fields to check are those of the last answer.";
      return;
    }
    return guarded("Checking " + field, async () => {
      const yaml = await rubricYaml();
      if (yaml === null) return;
      const reply = await call("/v1/rubrics/coherence", { rubric: yaml, text: $("input-text").value, field: field });
      if (!reply.ok) return refused(reply);
      hideError();
      showCoherence(reply.body);
      $("status").textContent = "Checked " + field + " in " + Math.round(reply.elapsed) + " ms.";
    });
  }

  // -- evaluation --------------------------------------------------------------------------------

  function csvRecords(text) {
    const records = [];
    let record = [];
    let value = "";
    let quoted = false;
    for (let i = 0; i < text.length; i += 1) {
      const c = text[i];
      if (quoted) {
        if (c === '"' && text[i + 1] === '"') {
          value += '"';
          i += 1;
        } else if (c === '"') quoted = false;
        else value += c;
      } else if (c === '"') quoted = true;
      else if (c === ",") {
        record.push(value);
        value = "";
      } else if (c === "\n" || c === "\r") {
        if (c === "\r" && text[i + 1] === "\n") i += 1;
        record.push(value);
        value = "";
        if (record.length > 1 || record[0] !== "") records.push(record);
        record = [];
      } else value += c;
    }
    record.push(value);
    if (record.length > 1 || record[0] !== "") records.push(record);
    return records;
  }

  // The rows of a labelled file: JSONL (one object a line), a JSON list, or CSV with a header.
  function labelledRows(name, text) {
    const trimmed = text.trim();
    if (/\.jsonl?$/i.test(name) || trimmed.startsWith("{") || trimmed.startsWith("[")) {
      if (trimmed.startsWith("[")) return JSON.parse(trimmed);
      return trimmed.split(/\r?\n/).filter((line) => line.trim()).map((line) => JSON.parse(line));
    }
    const [header, ...records] = csvRecords(text.replace(/^\uFEFF/, ""));
    if (!header) return [];
    return records.map((record) => Object.fromEntries(header.map((column, i) => [column.trim(), record[i] === undefined ? "" : record[i]])));
  }

  function svgNode(tag, attributes, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attributes || {})) {
      if (!SVG_ATTRIBUTES.has(key)) throw new Error("not an attribute of the charts: " + key);
      node.setAttribute(key, String(value));
    }
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  // A unit square chart (x and y from 0 to 1) with its axes and labels; `draw(x, y)` maps data to the plot.
  function chart(label, xLabel, yLabel, draw, diagonal) {
    const size = 220;
    const pad = 30;
    const svg = svgNode("svg", { width: size + pad + 10, height: size + pad + 10, viewBox: "0 0 " + (size + pad + 10) + " " + (size + pad + 10),
                                 role: "img", "aria-label": label, class: "chart" });
    const x = (v) => pad + v * size;
    const y = (v) => 10 + (1 - v) * size;
    if (diagonal) svg.appendChild(svgNode("line", { x1: x(0), y1: y(0), x2: x(1), y2: y(1), class: "diagonal" }));
    svg.appendChild(svgNode("path", { d: "M" + x(0) + " " + y(1) + " V" + y(0) + " H" + x(1), class: "axis" }));
    for (const tick of [0, 0.5, 1]) {
      svg.appendChild(svgNode("text", { x: x(tick) - 6, y: y(0) + 14 }, tick));
      svg.appendChild(svgNode("text", { x: 4, y: y(tick) + 3 }, tick));
    }
    svg.appendChild(svgNode("text", { x: x(0.5) - 25, y: y(0) + 26 }, xLabel));
    svg.appendChild(svgNode("text", { x: x(0) + 4, y: y(1) + 10 }, yLabel));
    draw(svg, x, y);
    return svg;
  }

  function figure(svg, caption) {
    const node = el("figure");
    node.appendChild(svg);
    node.appendChild(el("figcaption", null, caption));
    return node;
  }

  function reliabilityDiagram(name, bins) {
    return chart(name + ": reliability diagram", "confidence", "accuracy", (svg, x, y) => {
      for (const bin of bins) {
        if (!bin.count || bin.accuracy === null) continue;
        const bar = svgNode("rect", { x: x(bin.lower) + 1, y: y(bin.accuracy), width: Math.max(1, x(bin.upper) - x(bin.lower) - 2),
                                      height: y(0) - y(bin.accuracy), class: "bin" });
        bar.appendChild(svgNode("title", {}, bin.count + " rows, confidence " + bin.confidence.toFixed(2) + ", accuracy " + bin.accuracy.toFixed(2)));
        svg.appendChild(bar);
      }
    }, true);
  }

  function coverageCurve(name, curve) {
    const points = curve.filter((point) => point.coverage !== null && point.accuracy !== null);
    return chart(name + ": accuracy against coverage", "coverage", "accuracy", (svg, x, y) => {
      if (points.length) {
        svg.appendChild(svgNode("polyline", { points: points.map((p) => x(p.coverage) + "," + y(p.accuracy)).join(" "), class: "curve" }));
      }
      for (const point of points) {
        const dot = svgNode("circle", { cx: x(point.coverage), cy: y(point.accuracy), r: 3, class: "point" });
        dot.appendChild(svgNode("title", {}, "confidence \u2265 " + point.threshold + ": coverage " + percent(point.coverage) + ", accuracy " + percent(point.accuracy)));
        svg.appendChild(dot);
      }
    });
  }

  function figureOf(value, digits) {
    return typeof value === "number" ? value.toFixed(digits === undefined ? 3 : digits) : "n/a";
  }

  function confusionTable(confusion) {
    const table = el("table", "confusion");
    const head = el("tr");
    head.appendChild(el("th", null, "gold \u2193 / answer \u2192"));
    for (const label of confusion.predicted) head.appendChild(el("th", null, label));
    const thead = el("thead");
    thead.appendChild(head);
    table.appendChild(thead);
    const tbody = el("tbody");
    confusion.counts.forEach((counts, i) => {
      const row = el("tr");
      const th = el("th", null, confusion.gold[i]);
      th.setAttribute("scope", "row");
      row.appendChild(th);
      counts.forEach((count) => cell(row, String(count), "number"));
      tbody.appendChild(row);
    });
    table.appendChild(tbody);
    return table;
  }

  // Which rubric was evaluated, and how its fields were read (the route's `evaluated`).
  function evaluatedAs(rubric, evaluated) {
    if (!evaluated) return "Evaluated " + shown(rubric) + ".";
    const applied = [];
    if ((evaluated.fitted || []).length) applied.push("fitted heads for " + evaluated.fitted.join(", "));
    if ((evaluated.calibrated || []).length) applied.push("its calibration of " + evaluated.calibrated.join(", "));
    if (evaluated.adapter) applied.push("the adapter " + shown(evaluated.adapter.file));
    if (evaluated.by === "name") {
      return "Evaluated " + shown(evaluated.name) + " as served, by name: " + (applied.length ? applied.join("; ") : "zero-shot (it has no calibration, heads or adapter)") + ".";
    }
    return "Evaluated the YAML in the editor (" + shown(rubric) + "), zero-shot" + (evaluated.adapter ? ", through the adapter " + shown(evaluated.adapter.file) : "") + ".";
  }

  function showEvaluation(fileName, body) {
    const box = $("eval-fields");
    clear(box);
    for (const [name, summary] of Object.entries(body.fields || {})) {
      const section = el("section", "eval-field");
      section.dataset.field = name;
      section.appendChild(el("h3", null, name));
      const facts = el("dl", "facts");
      fact(facts, "rows", String(summary.n));
      fact(facts, "accuracy", figureOf(summary.accuracy));
      fact(facts, "macro-F1", figureOf(summary.macro_f1));
      fact(facts, "ECE", figureOf(summary.ece));
      fact(facts, "coverage", figureOf(summary.abstention && summary.abstention.coverage));
      section.appendChild(facts);
      section.appendChild(confusionTable(summary.confusion));
      section.appendChild(figure(reliabilityDiagram(name, summary.reliability || []),
        "Reliability: each bar is a confidence bin, its height the accuracy there; the dashed line is perfect calibration."));
      section.appendChild(figure(coverageCurve(name, summary.coverage_curve || []),
        "Abstention: answering only above a confidence threshold (0 to 1 by 0.05), the accuracy against the share answered."));
      box.appendChild(section);
    }
    const ignored = (body.ignored_columns || []).length ? " · columns not read: " + body.ignored_columns.join(", ") : "";
    $("eval-summary").textContent = fileName + ": " + counted(body.rows, "row") + " · " + counted(Object.keys(body.fields || {}).length, "labelled field") +
      " · " + counted(body.errors, "row error") + ignored;
    $("eval-how").textContent = evaluatedAs(body.rubric, body.evaluated);
    $("eval-view").hidden = false;
  }

  function evaluateFile(file) {
    if (!file) return;
    return guarded("Evaluating on " + file.name, async () => {
      let rows;
      try {
        rows = labelledRows(file.name, await file.text());
      } catch (failure) {
        showError(null, file.name + " could not be read: " + shown(failure && failure.message));
        $("status").textContent = "Not evaluated.";
        return;
      }
      // A served rubric (chosen, or loaded into the editor and not edited) by name: as served, calibration and heads included.
      const name = $("rubric-choice").value || (baselineName && $("rubric-yaml").value === baselineYaml ? baselineName : "");
      const reply = await call("/v1/rubrics/eval", name ? { name: name, rows: rows } : { rubric: $("rubric-yaml").value, rows: rows });
      if (!reply.ok) return refused(reply);
      hideError();
      showEvaluation(file.name, reply.body);
      $("status").textContent = "Evaluated " + counted(rows.length, "row") + " in " + Math.round(reply.elapsed) + " ms.";
    });
  }

  // -- copy as -------------------------------------------------------------------------------------

  const COPIES = {
    yaml: ["The rubric as YAML", (body) => body.yaml],
    python: ["The rubric as a pydantic class (@decision)", (body) => body.python || "# " + body.python_problem],
    systemone: ["The input as a POST /v1/systemone request", (body) => JSON.stringify(body.systemone, null, 2)],
    decisions: ["The input as a POST /v1/decisions request", (body) => JSON.stringify(body.decisions, null, 2)],
  };

  async function showCopy(title, text, what) {
    $("curl-title").textContent = title;
    $("curl-text").textContent = text;
    $("curl-text").dataset.format = what;
    $("curl-view").hidden = false;
    try {
      await navigator.clipboard.writeText(text);
      $("status").textContent = "Copied " + title.charAt(0).toLowerCase() + title.slice(1) + ".";
    } catch (_) {
      $("status").textContent = title + " is shown below; select it to copy.";
    }
  }

  function copyAs(what) {
    return guarded("Writing the rubric as " + what, async () => {
      const name = $("rubric-choice").value;
      const request = name ? { name: name, text: $("input-text").value } : { rubric: $("rubric-yaml").value, text: $("input-text").value };
      const reply = await call("/v1/rubrics/export", request);
      if (!reply.ok) return refused(reply);
      hideError();
      const [title, text] = COPIES[what];
      await showCopy(title, text(reply.body), what);
      if (reply.body.notes && reply.body.notes.length && what !== "yaml" && what !== "python") {
        $("status").textContent += " Note: " + reply.body.notes.join("; ") + ".";
      }
    });
  }

  // -- actions -----------------------------------------------------------------------------------

  async function run() {
    if (running) return;
    running = true;
    $("run").disabled = true;
    const request = currentRequest();
    $("status").textContent = "Running " + request.rubric + "…";
    const began = performance.now();
    try {
      const response = await fetch(request.path, {
        method: "POST", headers: headers(true), body: JSON.stringify(request.body), credentials: "omit",
      });
      const body = await readReply(response);
      const elapsed = performance.now() - began;
      if (response.ok && body && typeof body === "object") {
        const plan = await planOf(request);
        showAnswers(request, body, elapsed, plan);
        if (plan) drawPlan(plan, request.rubric);
        $("status").textContent = "Answered in " + Math.round(elapsed) + " ms.";
      } else {
        showError(response.status, body);
        $("status").textContent = "Refused (" + response.status + ") after " + Math.round(elapsed) + " ms.";
      }
    } catch (failure) {
      showError(null, "could not reach the server: " + shown(failure && failure.message));
      $("status").textContent = "No answer.";
    } finally {
      running = false;
      $("run").disabled = false;
    }
  }

  function describeChoice() {
    const name = $("rubric-choice").value;
    const entry = served.find((item) => item.name === name);
    if (!entry) {
      $("rubric-note").textContent = "The YAML rubric below is sent with the input (zero-shot: no calibration, no fitted heads).";
      return;
    }
    const fitted = (entry.fitted && entry.fitted.length ? "; fitted heads for " + entry.fitted.join(", ") : "") +
      (entry.calibrated ? "; calibrated" : "");
    const passes = entry.plan && typeof entry.plan.forward_passes === "number"
      ? ", " + counted(entry.plan.forward_passes, "forward pass") : "";
    $("rubric-note").textContent = counted(entry.fields.length, "field") + passes + fitted + ". " + shown(entry.instructions || "");
  }

  async function loadRubrics() {
    const choice = $("rubric-choice");
    const wanted = choice.value || new URLSearchParams(window.location.search).get("rubric") || "";
    try {
      const response = await fetch("/v1/rubrics", { headers: headers(true), credentials: "omit" });
      const body = await readReply(response);
      if (!response.ok) {
        showError(response.status, body);
        $("status").textContent = response.status === 401
          ? "The server asks for an API key: type it above, then reload the list."
          : "The served rubrics could not be listed.";
        return;
      }
      hideError();
      served = Array.isArray(body.rubrics) ? body.rubrics : [];
      while (choice.options.length > 1) choice.remove(1);
      for (const entry of served) {
        const option = el("option", null, entry.name);
        option.value = entry.name;
        choice.appendChild(option);
      }
      choice.value = served.some((item) => item.name === wanted) ? wanted : "";
      describeChoice();
      $("status").textContent = served.length + " served rubrics.";
      if (choice.value) showChosenPlan();
      checkEditor();
    } catch (failure) {
      showError(null, "could not reach the server: " + shown(failure && failure.message));
    }
  }

  async function copyCurl() {
    await showCopy("The request as curl", curlOf(currentRequest()), "curl");
    if ($("status").textContent.startsWith("Copied")) {
      $("status").textContent = "Copied the request as curl (the key is left as $DECISIONFLOW_API_KEY).";
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("rubric-yaml").value = EXAMPLE_RUBRIC;
    $("request").addEventListener("submit", (event) => {
      event.preventDefault();
      run();
    });
    $("rubric-choice").addEventListener("change", () => {
      describeChoice();
      showChosenPlan();
    });
    $("rubric-yaml").addEventListener("input", () => {
      $("rubric-choice").value = "";
      describeChoice();
      checkSoon();
    });
    $("reload-rubrics").addEventListener("click", loadRubrics);
    $("api-key").addEventListener("change", () => {
      checked.clear();
      loadRubrics();
    });
    $("copy-curl").addEventListener("click", copyCurl);
    for (const what of Object.keys(COPIES)) $("copy-" + what).addEventListener("click", () => copyAs(what));
    $("load-yaml").addEventListener("click", loadYaml);
    $("compare").addEventListener("click", compare);
    $("check-coherence").addEventListener("click", checkCoherence);
    $("eval-file").addEventListener("change", () => evaluateFile($("eval-file").files[0]));
    const drop = $("eval-drop");
    drop.addEventListener("dragover", (event) => {
      event.preventDefault();
      drop.classList.add("over");
    });
    drop.addEventListener("dragleave", () => drop.classList.remove("over"));
    drop.addEventListener("drop", (event) => {
      event.preventDefault();
      drop.classList.remove("over");
      evaluateFile(event.dataTransfer && event.dataTransfer.files[0]);
    });
    document.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        run();
      }
    });
    describeChoice();
    loadRubrics();
  });
})();
