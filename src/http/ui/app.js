// The overview page of stq (docs/api.md section 11). Plain JavaScript, no build
// step, served by stq itself like everything the page loads.
//
// The token is kept only in this tab's sessionStorage (never localStorage, never a
// URL) and leaves the page only in the Authorization header of calls to this origin.
// The page marks what it has drawn in data-* attributes (data-state, counts), so a
// test can wait for them instead of guessing at timings.
(function () {
  "use strict";

  const TOKEN_KEY = "stq.token";
  // Pages of the metric walk, and how many points one chart may hold at most.
  const PAGE_LIMIT = 1000;
  const MAX_POINTS = 20000;
  const HOUR_MS = 3600 * 1000;
  // A value is numeric when it is a JSON number, also with a leading "+"
  // (CONTRACT 10.2), and finite as a double.
  const NUMBER = /^[+-]?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;

  const element = (id) => document.getElementById(id);
  const ui = {
    tokenForm: element("token-form"),
    token: element("token"),
    forget: element("forget"),
    error: element("error"),
    status: element("status"),
    overview: element("overview"),
    stations: element("stations"),
    windowForm: element("window-form"),
    preset: element("window-preset"),
    from: element("from"),
    to: element("to"),
    yields: element("yields"),
    chartStation: element("chart-station"),
    chartMetric: element("chart-metric"),
    chartSummary: element("chart-summary"),
    chart: element("chart"),
  };

  // The page loads nothing from elsewhere, and stq's Content-Security-Policy says
  // so; a refusal would be a bug of the page, counted where a test can see it.
  let violations = 0;
  document.addEventListener("securitypolicyviolation", () => {
    violations += 1;
    document.documentElement.dataset.policyViolations = String(violations);
  });

  const state = {
    stations: [],
    window: null,
    plot: null,
    // Each load takes a ticket; an answer to an older one arrives too late to show.
    tickets: { overview: 0, yields: 0, names: 0, chart: 0 },
  };

  /** An API error: the contract's `error.message`, shown on the page as is. */
  class ApiFailure extends Error {
    constructor(message, code) {
      super(message);
      this.code = code;
    }
  }

  // ---------------------------------------------------------------- the API

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  async function api(path) {
    let response;
    try {
      response = await fetch(path, {
        headers: { Authorization: "Bearer " + token(), Accept: "application/json" },
        cache: "no-store",
        credentials: "omit",
      });
    } catch (failure) {
      throw new ApiFailure("stq could not be reached: " + failure.message, null);
    }
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      body = null;
    }
    if (!response.ok) {
      const error = body && body.error;
      const message =
        error && typeof error.message === "string"
          ? error.message
          : response.status + " " + response.statusText;
      throw new ApiFailure(message, error ? error.code : null);
    }
    if (!body || !Array.isArray(body.data)) {
      throw new ApiFailure("stq answered " + path + " without a data array", null);
    }
    return body;
  }

  function query(parameters) {
    return new URLSearchParams(parameters).toString();
  }

  function windowParameters() {
    return {
      from: new Date(state.window.from).toISOString(),
      to: new Date(state.window.to).toISOString(),
    };
  }

  // ---------------------------------------------------------------- messages

  function showError(failure) {
    ui.error.textContent = failure instanceof Error ? failure.message : String(failure);
    ui.error.hidden = false;
    ui.error.dataset.code = (failure && failure.code) || "";
  }

  function clearError() {
    ui.error.textContent = "";
    ui.error.hidden = true;
    delete ui.error.dataset.code;
  }

  function setStatus(text) {
    ui.status.textContent = text;
    delete ui.status.dataset.state;
  }

  // ---------------------------------------------------------------- time

  /** Milliseconds of an RFC 3339 date-time as the API writes it (any fraction). */
  function instant(text) {
    const normalized = text.toUpperCase().replace(/\.(\d{1,3})\d*/, (_, digits) => "." + digits);
    return Date.parse(normalized);
  }

  /** `YYYY-MM-DDTHH:MM:SS` in UTC, for a datetime-local input. */
  function inputValue(milliseconds) {
    return new Date(milliseconds).toISOString().slice(0, 19);
  }

  /** A datetime-local input's value read as UTC; NaN when empty or bad. */
  function readInput(input) {
    const value = input.value;
    if (!value) {
      return NaN;
    }
    return Date.parse(value.length === 16 ? value + ":00Z" : value + "Z");
  }

  function utcText(milliseconds, zone = true) {
    const text = new Date(milliseconds).toISOString().slice(0, 19).replace("T", " ");
    return zone ? text + " UTC" : text;
  }

  /** The window a preset names; `span` covers every record of the stations. */
  function presetWindow(preset) {
    const second = 1000;
    if (preset === "span" && state.stations.length > 0) {
      const firsts = state.stations.map((station) => instant(station.first));
      const lasts = state.stations.map((station) => instant(station.last));
      const from = Math.floor(Math.min(...firsts) / second) * second;
      // The window is half-open: it must end after the last record.
      const to = Math.floor(Math.max(...lasts) / second) * second + second;
      return { from, to };
    }
    const to = Math.ceil(Date.now() / second) * second;
    const hours = preset === "7d" ? 7 * 24 : 24;
    return { from: to - hours * HOUR_MS, to };
  }

  function setWindow(span) {
    state.window = span;
    ui.from.value = inputValue(span.from);
    ui.to.value = inputValue(span.to);
  }

  // ---------------------------------------------------------------- rendering

  function cell(row, text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) {
      td.className = className;
    }
    row.appendChild(td);
    return td;
  }

  function percent(fraction) {
    return fraction === null || fraction === undefined ? "—" : (fraction * 100).toFixed(1) + " %";
  }

  // A table row headed by its station's id.
  function stationRow(stationId) {
    const row = document.createElement("tr");
    row.dataset.station = stationId;
    const name = document.createElement("th");
    name.scope = "row";
    name.textContent = stationId;
    row.appendChild(name);
    return row;
  }

  function renderStations() {
    const body = ui.stations.tBodies[0];
    body.replaceChildren();
    for (const station of state.stations) {
      const row = stationRow(station.station_id);
      cell(row, String(station.units), "number");
      cell(row, String(station.metrics), "number");
      // In UTC like the window; the title keeps the time as the station wrote it.
      cell(row, utcText(instant(station.first), false)).title = station.first;
      cell(row, utcText(instant(station.last), false)).title = station.last;
      body.appendChild(row);
    }
    ui.stations.dataset.rows = String(state.stations.length);
    ui.stations.dataset.state = "ready";

    const previous = ui.chartStation.value;
    ui.chartStation.replaceChildren();
    for (const station of state.stations) {
      ui.chartStation.appendChild(new Option(station.station_id, station.station_id));
    }
    if (state.stations.some((station) => station.station_id === previous)) {
      ui.chartStation.value = previous;
    }
  }

  function renderYields(rows) {
    const byStation = new Map(rows.map((row) => [row.station_id, row]));
    const body = ui.yields.tBodies[0];
    body.replaceChildren();
    for (const station of state.stations) {
      const summary = byStation.get(station.station_id);
      const row = stationRow(station.station_id);
      cell(row, String(summary ? summary.records : 0), "number");
      cell(row, String(summary ? summary.units : 0), "number");
      const firstPass = cell(row, percent(summary ? summary.first_pass_yield : null), "number");
      const final = cell(row, percent(summary ? summary.final_yield : null), "number");
      if (summary) {
        firstPass.title = summary.first_pass + " of " + summary.units + " units passed at once";
        final.title = summary.final_pass + " of " + summary.units + " units passed in the end";
      }
      body.appendChild(row);
    }
    ui.yields.dataset.rows = String(state.stations.length);
    ui.yields.dataset.state = "ready";
  }

  function renderMetricNames(rows) {
    const previous = ui.chartMetric.value;
    const names = [...new Set(rows.filter((row) => row.numeric > 0).map((row) => row.name))];
    ui.chartMetric.replaceChildren();
    for (const name of names) {
      ui.chartMetric.appendChild(new Option(name, name));
    }
    if (names.includes(previous)) {
      ui.chartMetric.value = previous;
    }
    ui.chartMetric.disabled = names.length === 0;
    return names.length;
  }

  function setChart(stateName, details) {
    ui.chart.dataset.state = stateName;
    for (const key of ["points", "series", "outOfLimits", "station", "metric"]) {
      if (details && key in details) {
        ui.chart.dataset[key] = String(details[key]);
      } else {
        delete ui.chart.dataset[key];
      }
    }
  }

  function clearPlot() {
    if (state.plot) {
      state.plot.destroy();
      state.plot = null;
    }
  }

  function numeric(text) {
    if (typeof text !== "string" || !NUMBER.test(text)) {
      return null;
    }
    const value = Number(text);
    return Number.isFinite(value) ? value : null;
  }

  /** The chart's columns: time, value, its limits, and the out-of-limit values. */
  function columns(records) {
    const times = [];
    const values = [];
    const lower = [];
    const upper = [];
    const outside = [];
    let skipped = 0;
    for (const record of records) {
      const value = numeric(record.value);
      if (value === null) {
        skipped += 1;
        continue;
      }
      const low = numeric(record.limit_lower);
      const high = numeric(record.limit_upper);
      times.push(instant(record.time_created) / 1000);
      values.push(value);
      lower.push(low);
      upper.push(high);
      const out = (low !== null && value < low) || (high !== null && value > high);
      outside.push(out ? value : null);
    }
    return { data: [times, values, lower, upper, outside], skipped };
  }

  function drawPlot(station, name, records, capped) {
    clearPlot();
    const { data, skipped } = columns(records);
    const points = data[0].length;
    const outOfLimits = data[4].filter((value) => value !== null).length;
    const unit = records.length > 0 && records[0].unit ? " (" + records[0].unit + ")" : "";
    if (points === 0) {
      ui.chartSummary.textContent =
        station + " · " + name + ": no numeric values in this window.";
      setChart("empty", { points: 0, series: 0, outOfLimits: 0, station, metric: name });
      return;
    }
    const stepped = uPlot.paths.stepped({ align: 1 });
    const limitLine = (label, color) => ({
      label,
      stroke: color,
      width: 1.5,
      dash: [6, 4],
      paths: stepped,
      points: { show: false },
    });
    const options = {
      width: Math.max(320, ui.chart.clientWidth),
      height: 280,
      tzDate: (seconds) => uPlot.tzDate(new Date(seconds * 1000), "Etc/UTC"),
      scales: { x: { time: true } },
      legend: { live: true },
      series: [
        { label: "time (UTC)" },
        {
          label: name + unit,
          stroke: "#1f5fbf",
          width: 1,
          points: { show: true, size: 4, fill: "#1f5fbf" },
        },
        limitLine("lower limit", "#6d7a8c"),
        limitLine("upper limit", "#b26a00"),
        {
          label: "out of limits",
          stroke: "#b3261e",
          width: 0,
          paths: () => null,
          points: { show: true, size: 9, width: 2, stroke: "#7f1d17", fill: "#e5483d" },
        },
      ],
      axes: [{}, { size: 60 }],
    };
    state.plot = new uPlot(options, data, ui.chart);
    const notes = [];
    if (skipped > 0) {
      notes.push(skipped + " non-numeric value" + (skipped === 1 ? "" : "s") + " left out");
    }
    if (capped) {
      notes.push("only the first " + MAX_POINTS + " records are drawn");
    }
    ui.chartSummary.textContent =
      station + " · " + name + unit + ": " + points + " point" + (points === 1 ? "" : "s") +
      ", " + outOfLimits + " out of limits" + (notes.length ? " (" + notes.join("; ") + ")" : "") + ".";
    setChart("drawn", {
      points,
      series: state.plot.series.length - 1,
      outOfLimits,
      station,
      metric: name,
    });
  }

  // ---------------------------------------------------------------- loading

  function ticket(kind) {
    state.tickets[kind] += 1;
    const mine = state.tickets[kind];
    return () => state.tickets[kind] === mine;
  }

  async function loadYields() {
    const current = ticket("yields");
    ui.yields.dataset.state = "loading";
    const parameters = { group_by: "station_id", ...windowParameters() };
    const body = await api("/units/summary?" + query(parameters));
    if (current()) {
      renderYields(body.data);
    }
  }

  /** The station's metric names in the window; false when a newer load took over. */
  async function loadMetricNames() {
    const current = ticket("names");
    const station = ui.chartStation.value;
    if (!station) {
      renderMetricNames([]);
      return true;
    }
    const parameters = { station_ids: station, group_by: "station_id", ...windowParameters() };
    const body = await api("/metrics/summary?" + query(parameters));
    if (!current()) {
      return false;
    }
    renderMetricNames(body.data);
    return true;
  }

  async function loadChart() {
    const current = ticket("chart");
    const station = ui.chartStation.value;
    const name = ui.chartMetric.value;
    if (!station || !name) {
      clearPlot();
      ui.chartSummary.textContent = station
        ? station + " has no numeric metric in this window."
        : "No station to chart.";
      setChart("empty", { points: 0, series: 0, outOfLimits: 0 });
      return;
    }
    setChart("loading");
    ui.chartSummary.textContent = "Loading " + name + " of " + station + "…";
    const base = { station_ids: station, names: name, ...windowParameters(), limit: PAGE_LIMIT };
    const records = [];
    let cursor = null;
    do {
      const parameters = cursor === null ? base : { ...base, cursor };
      const body = await api("/metrics?" + query(parameters));
      if (!current()) {
        return;
      }
      records.push(...body.data);
      cursor = body.meta ? body.meta.next_cursor : null;
    } while (cursor && records.length < MAX_POINTS);
    drawPlot(station, name, records.slice(0, MAX_POINTS), Boolean(cursor));
  }

  /** Runs a load; its failure is shown on the page. */
  async function run(load, failedPart) {
    try {
      await load();
    } catch (failure) {
      if (failedPart) {
        failedPart.dataset.state = "error";
      }
      showError(failure);
    }
  }

  async function refreshChart() {
    clearError();
    await run(async () => {
      if (await loadMetricNames()) {
        await loadChart();
      }
    }, ui.chart);
  }

  async function refreshWindow() {
    clearError();
    const count = state.stations.length;
    setStatus(
      count + (count === 1 ? " station, " : " stations, ") +
        utcText(state.window.from) + " to " + utcText(state.window.to) + "."
    );
    await Promise.all([run(loadYields, ui.yields), refreshChart()]);
  }

  async function loadOverview() {
    const current = ticket("overview");
    clearError();
    clearPlot();
    ui.overview.hidden = true;
    ui.stations.dataset.state = "loading";
    setStatus("Loading the stations this token sees…");
    try {
      const body = await api("/stations");
      if (!current()) {
        return;
      }
      state.stations = body.data;
    } catch (failure) {
      if (current()) {
        ui.stations.dataset.state = "error";
        setStatus("");
        showError(failure);
      }
      return;
    }
    renderStations();
    ui.overview.hidden = false;
    if (state.stations.length === 0) {
      setStatus("This token sees no station with records.");
    }
    if (ui.preset.value === "custom" && state.window) {
      setWindow(state.window);
    } else {
      setWindow(presetWindow(ui.preset.value));
    }
    await refreshWindow();
  }

  // ---------------------------------------------------------------- events

  ui.tokenForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const entered = ui.token.value.trim();
    if (!entered) {
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, entered);
    // The token stays in sessionStorage only, not in the form.
    ui.token.value = "";
    ui.token.placeholder = "token set for this tab";
    loadOverview();
  });

  ui.forget.addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    state.tickets.overview += 1;
    clearPlot();
    clearError();
    ui.overview.hidden = true;
    ui.token.placeholder = "";
    setStatus("Token forgotten. Enter a token to see its stations.");
    ui.status.dataset.state = "forgotten";
  });

  ui.preset.addEventListener("change", () => {
    if (ui.preset.value === "custom") {
      ui.from.focus();
      return;
    }
    setWindow(presetWindow(ui.preset.value));
    refreshWindow();
  });

  ui.windowForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const from = readInput(ui.from);
    const to = readInput(ui.to);
    if (!Number.isFinite(from) || !Number.isFinite(to) || from >= to) {
      showError(new Error("The window needs a start before its end."));
      return;
    }
    ui.preset.value = "custom";
    state.window = { from, to };
    refreshWindow();
  });

  ui.chartStation.addEventListener("change", () => refreshChart());
  ui.chartMetric.addEventListener("change", () => {
    clearError();
    run(loadChart, ui.chart);
  });

  window.addEventListener("resize", () => {
    if (state.plot) {
      state.plot.setSize({ width: Math.max(320, ui.chart.clientWidth), height: 280 });
    }
  });

  if (token()) {
    ui.token.placeholder = "token set for this tab";
    loadOverview();
  }
})();
