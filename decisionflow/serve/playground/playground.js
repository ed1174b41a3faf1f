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

  const $ = (id) => document.getElementById(id);
  let served = []; // what GET /v1/rubrics listed
  let running = false;

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

  function renderField(name, result) {
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

  function showAnswers(request, body, elapsedMs) {
    hideError();
    const fields = $("fields");
    clear(fields);
    const results = body.fields || {};
    for (const name of Object.keys(results)) fields.appendChild(renderField(name, results[name]));
    const stats = body.stats || {};
    const parts = [request.rubric, counted(Object.keys(results).length, "field"), Math.round(elapsedMs) + " ms"];
    if (typeof stats.forward_passes === "number") parts.push(counted(stats.forward_passes, "forward pass"));
    if (typeof stats.input_tokens === "number") parts.push(counted(stats.input_tokens, "input token"));
    $("results-summary").textContent = parts.join(" · ");
    $("results-summary").dataset.elapsedMs = String(Math.round(elapsedMs));
    $("results").hidden = false;
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
        showAnswers(request, body, elapsed);
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
    const fitted = entry.fitted && entry.fitted.length ? "; fitted heads for " + entry.fitted.join(", ") : "";
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
    } catch (failure) {
      showError(null, "could not reach the server: " + shown(failure && failure.message));
    }
  }

  async function copyCurl() {
    const text = curlOf(currentRequest());
    $("curl-text").textContent = text;
    $("curl-view").hidden = false;
    try {
      await navigator.clipboard.writeText(text);
      $("status").textContent = "Copied the request as curl (the key is left as $DECISIONFLOW_API_KEY).";
    } catch (_) {
      $("status").textContent = "The request as curl is shown below; select it to copy.";
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("rubric-yaml").value = EXAMPLE_RUBRIC;
    $("request").addEventListener("submit", (event) => {
      event.preventDefault();
      run();
    });
    $("rubric-choice").addEventListener("change", describeChoice);
    $("rubric-yaml").addEventListener("input", () => {
      $("rubric-choice").value = "";
      describeChoice();
    });
    $("reload-rubrics").addEventListener("click", loadRubrics);
    $("api-key").addEventListener("change", loadRubrics);
    $("copy-curl").addEventListener("click", copyCurl);
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
