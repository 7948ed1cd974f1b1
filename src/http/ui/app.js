// The overview page of stq (docs/api.md section 11). Plain JavaScript, no build
// step, served by stq itself like everything the page loads.
//
// The token is kept only in this tab's sessionStorage (never localStorage, never a
// URL) and leaves the page only in the Authorization header of calls to this origin,
// the streams the page follows included (so they are read with fetch: EventSource
// cannot send that header).
// The page marks what it has drawn in data-* attributes (data-state, counts), so a
// test can wait for them instead of guessing at timings.
//
// Times are shown, and days cut, in one IANA time zone: the browser's by default,
// when stq knows its name (its OpenAPI document lists the names `tz` accepts).
(function () {
  "use strict";

  const TOKEN_KEY = "stq.token";
  // Pages of the metric walk, and how many points one chart may hold at most.
  const PAGE_LIMIT = 1000;
  const MAX_POINTS = 20000;
  const SECOND_MS = 1000;
  const HOUR_MS = 3600 * SECOND_MS;
  const DAY_MS = 24 * HOUR_MS;
  // The local-day presets: their first day and the day after their last, counted
  // from today in the chosen zone.
  const LOCAL_DAYS = { today: [0, 1], yesterday: [-1, 0], days7: [-6, 1] };
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
    live: element("live"),
    overview: element("overview"),
    stations: element("stations"),
    windowForm: element("window-form"),
    preset: element("window-preset"),
    from: element("from"),
    to: element("to"),
    zone: element("zone"),
    zoneNote: element("zone-note"),
    bucket: element("bucket"),
    yieldsDay: element("yields-day"),
    yields: element("yields"),
    chartStation: element("chart-station"),
    chartMetric: element("chart-metric"),
    chartSummary: element("chart-summary"),
    chartStats: element("chart-stats"),
    chartDays: element("chart-days"),
    chart: element("chart"),
    controlSummary: element("control-summary"),
    controlStats: element("control-stats"),
    controlI: element("control-i"),
    controlMr: element("control-mr"),
    controlFlags: element("control-flags"),
    controlFlagsNote: element("control-flags-note"),
    controlFlagsCount: element("control-flags-count"),
    controlFlagsDetails: element("control-flags-details"),
    unstable: element("unstable"),
    unstableEmpty: element("unstable-empty"),
    downloads: [...document.querySelectorAll("button.download")],
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
    // The zone of every time the page shows and of the days it asks for.
    zone: "UTC",
    // The chosen station's /metrics/summary rows over the window, by name.
    metricRows: new Map(),
    plot: null,
    // The control view's I and MR charts.
    controlPlots: [],
    // Each load takes a ticket; an answer to an older one arrives too late to show.
    tickets: { overview: 0, yields: 0, names: 0, chart: 0, unstable: 0 },
    // The API call behind each table as shown (by its button's data-table), which
    // its "Download CSV" sends again asking for CSV.
    tables: new Map(),
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

  /** A call to the API with the token, asking for `accept`. */
  async function send(path, accept) {
    try {
      return await fetch(path, {
        headers: { Authorization: "Bearer " + token(), Accept: accept },
        cache: "no-store",
        credentials: "omit",
      });
    } catch (failure) {
      throw new ApiFailure("stq could not be reached: " + failure.message, null);
    }
  }

  /** The failure a JSON error body names; `fallback` the message when it names none. */
  function failureOf(body, fallback) {
    const error = body && body.error;
    const message = error && typeof error.message === "string" ? error.message : fallback;
    return new ApiFailure(message, error ? error.code : null);
  }

  /** The failure of a refused call, from its JSON error body (any format's). */
  function refusal(response, body) {
    return failureOf(body, response.status + " " + response.statusText);
  }

  async function json(response) {
    try {
      return await response.json();
    } catch (_) {
      return null;
    }
  }

  async function api(path) {
    const response = await send(path, "application/json");
    const body = await json(response);
    if (!response.ok) {
      throw refusal(response, body);
    }
    if (!body || !Array.isArray(body.data)) {
      throw new ApiFailure("stq answered " + path + " without a data array", null);
    }
    return body;
  }

  function query(parameters) {
    return new URLSearchParams(parameters).toString();
  }

  /** Remembers the call behind a table, for its "Download CSV". */
  function shown(table, path) {
    state.tables.set(table, path);
    for (const button of ui.downloads) {
      if (button.dataset.table === table) {
        button.disabled = false;
      }
    }
  }

  /**
   * Saves a table as CSV: its call again with `format=csv`, the token in the
   * Authorization header as for every call, and the answer saved as a file.
   */
  async function downloadCsv(button) {
    const path = state.tables.get(button.dataset.table);
    if (!path) {
      return;
    }
    button.dataset.state = "loading";
    const response = await send(path + (path.includes("?") ? "&" : "?") + "format=csv", "text/csv");
    if (!response.ok) {
      throw refusal(response, await json(response));
    }
    const csv = await response.blob();
    const link = document.createElement("a");
    link.href = URL.createObjectURL(csv);
    link.download = "stq-" + button.dataset.table + ".csv";
    document.body.appendChild(link);
    link.click();
    link.remove();
    // Once the browser has taken the file.
    setTimeout(() => URL.revokeObjectURL(link.href), 60 * SECOND_MS);
    button.dataset.bytes = String(csv.size);
    button.dataset.state = "saved";
  }

  function windowParameters() {
    return {
      from: new Date(state.window.from).toISOString(),
      to: new Date(state.window.to).toISOString(),
    };
  }

  /** A summary's window and zone, and its day buckets when the picker asks for them. */
  function summaryParameters(bucket) {
    const parameters = { ...windowParameters(), tz: state.zone };
    return bucket ? { ...parameters, bucket } : parameters;
  }

  // ---------------------------------------------------------------- streams

  /**
   * A reader of the Server-Sent Events format (WHATWG HTML, "Server-sent events")
   * for one connection: `feed(text)` takes the text as it arrives, in pieces of any
   * size, and calls `on.event(type, data)` at each event's end and
   * `on.retry(milliseconds)` at each valid `retry` field. `lastEventId()` is the id
   * of the last event, starting from `lastEventId` (the previous connection's, as
   * browsers keep it).
   */
  function eventReader(on, lastEventId) {
    let buffer = "";
    // The last piece ended in CR: an LF at the start of the next ends no other line.
    let afterCr = false;
    let type = "";
    let data = [];
    let idBuffer = lastEventId;

    function line(text) {
      if (text === "") {
        lastEventId = idBuffer;
        if (data.length > 0) {
          on.event(type || "message", data.join("\n"));
        }
        type = "";
        data = [];
        return;
      }
      if (text.startsWith(":")) {
        // A comment: stq's keep-alive.
        return;
      }
      const colon = text.indexOf(":");
      const name = colon < 0 ? text : text.slice(0, colon);
      let value = colon < 0 ? "" : text.slice(colon + 1);
      if (value.startsWith(" ")) {
        value = value.slice(1);
      }
      if (name === "event") {
        type = value;
      } else if (name === "data") {
        data.push(value);
      } else if (name === "id" && !value.includes("\0")) {
        idBuffer = value;
      } else if (name === "retry" && /^\d+$/.test(value)) {
        on.retry(Number(value));
      }
    }

    function feed(text) {
      buffer += text;
      let start = afterCr && buffer.startsWith("\n") ? 1 : 0;
      afterCr = false;
      // A line ends at CRLF, LF or CR.
      const ends = /\r\n|\r|\n/g;
      ends.lastIndex = start;
      for (let end = ends.exec(buffer); end !== null; end = ends.exec(buffer)) {
        afterCr = end[0] === "\r" && ends.lastIndex === buffer.length;
        line(buffer.slice(start, end.index));
        start = ends.lastIndex;
      }
      buffer = buffer.slice(start);
    }

    return { feed, lastEventId: () => lastEventId };
  }

  /** Resolves after `milliseconds`, or as soon as `signal` aborts. */
  function pause(milliseconds, signal) {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, milliseconds);
      signal.addEventListener(
        "abort",
        () => {
          clearTimeout(timer);
          resolve();
        },
        { once: true }
      );
    });
  }

  /**
   * Follows one of stq's streams (docs/api.md section 14.2) until `stop()`. It does
   * what EventSource does, with the token in the Authorization header (which
   * EventSource cannot send): it reads the events as they come, and when the
   * connection ends (stq stopped, a proxy cut it), it waits the stream's `retry` and
   * asks again with the last event's id in Last-Event-ID, and stq continues after
   * that event. `on.state(name)` hears "connecting", "live", "reconnecting" and
   * "stopped"; `on.records(records)` and `on.reset(reason)` the events; and
   * `on.failure(failure)` why it stopped: an `error` event (the token was revoked or
   * expired), a refusal, or an event it cannot read. An answer of 500 or more
   * (stq overloaded, a proxy's gateway error) is asked again.
   */
  function follow(path, on) {
    const controller = new AbortController();
    let retry = 2000;
    let lastEventId = "";
    let stopped = false;

    function stop() {
      stopped = true;
      controller.abort();
    }

    function fail(failure) {
      stop();
      on.state("stopped");
      on.failure(failure);
    }

    function event(type, data) {
      if (stopped) {
        return;
      }
      let body;
      try {
        body = JSON.parse(data);
      } catch (_) {
        fail(new ApiFailure("stq sent a " + type + " event that is not JSON", null));
        return;
      }
      if (type === "records") {
        on.records(body);
      } else if (type === "reset") {
        on.reset(body.reason);
      } else if (type === "error") {
        fail(failureOf(body, "stq ended the stream"));
      }
    }

    /** One connection, until it ends. */
    async function connect() {
      const headers = { Authorization: "Bearer " + token(), Accept: "text/event-stream" };
      if (lastEventId) {
        headers["Last-Event-ID"] = lastEventId;
      }
      const response = await fetch(path, {
        headers,
        cache: "no-store",
        credentials: "omit",
        signal: controller.signal,
      });
      if (!response.ok) {
        const failure = refusal(response, await json(response));
        if (response.status < 500) {
          fail(failure);
        }
        return;
      }
      if (!(response.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
        fail(new ApiFailure("stq answered " + path + " without an event stream", null));
        return;
      }
      on.state("live");
      const events = eventReader(
        {
          event,
          retry: (milliseconds) => {
            retry = milliseconds;
          },
        },
        lastEventId
      );
      const decoder = new TextDecoder();
      const body = response.body.getReader();
      try {
        for (let piece = await body.read(); !piece.done; piece = await body.read()) {
          events.feed(decoder.decode(piece.value, { stream: true }));
          if (stopped) {
            // An error event: the abort has ended the connection.
            return;
          }
        }
      } finally {
        lastEventId = events.lastEventId();
      }
    }

    (async () => {
      on.state("connecting");
      while (!stopped) {
        try {
          await connect();
        } catch (_) {
          // Unreachable, cut off, or stopped: asked again unless stopped.
        }
        if (stopped) {
          return;
        }
        on.state("reconnecting");
        await pause(retry, controller.signal);
      }
    })();
    return { stop };
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

  /**
   * A wall-clock time as the milliseconds it would be in UTC. Days past a month's
   * end roll over, and years below 100 stay what they are (unlike Date.UTC's).
   */
  function civil(year, month, day, hour = 0, minute = 0, second = 0) {
    const date = new Date(0);
    date.setUTCFullYear(year, month - 1, day);
    date.setUTCHours(hour, minute, second, 0);
    return date.getTime();
  }

  const wallFormats = new Map();

  // Intl reads the browser's own copy of the IANA database; the page offers only
  // zones that stq knows by the same name.
  function wallFormat(zone) {
    let format = wallFormats.get(zone);
    if (!format) {
      format = new Intl.DateTimeFormat("en-US", {
        timeZone: zone,
        hourCycle: "h23",
        year: "numeric",
        month: "numeric",
        day: "numeric",
        hour: "numeric",
        minute: "numeric",
        second: "numeric",
      });
      wallFormats.set(zone, format);
    }
    return format;
  }

  /** The wall-clock time in `zone` at an instant (to the second), as `civil` writes it. */
  function wallClock(milliseconds, zone = state.zone) {
    const whole = Math.floor(milliseconds / SECOND_MS) * SECOND_MS;
    if (zone === "UTC") {
      return whole;
    }
    const fields = {};
    for (const part of wallFormat(zone).formatToParts(whole)) {
      fields[part.type] = Number(part.value);
    }
    return civil(fields.year, fields.month, fields.day, fields.hour, fields.minute, fields.second);
  }

  /** The zone's offset from UTC at an instant, in milliseconds. */
  function offsetAt(milliseconds, zone = state.zone) {
    return wallClock(milliseconds, zone) - Math.floor(milliseconds / SECOND_MS) * SECOND_MS;
  }

  /**
   * The instant of a wall-clock time in `zone`, read as stq reads bucket boundaries
   * (docs/api.md section 10): a time the zone repeats is its earlier occurrence, and
   * one it skips is the first instant after the gap. So the page's local days are
   * the server's `1d` buckets.
   */
  function instantAt(wall, zone = state.zone) {
    if (zone === "UTC") {
      return wall;
    }
    // No zone has changed its offset twice within a day, so the offsets a day
    // either side are the ones that can apply.
    const offsets = [
      ...new Set([wall - DAY_MS, wall, wall + DAY_MS].map((t) => offsetAt(t, zone))),
    ];
    const fitting = offsets
      .map((offset) => wall - offset)
      .filter((candidate) => wallClock(candidate, zone) === wall);
    if (fitting.length > 0 || offsets.length === 1) {
      return fitting.length > 0 ? Math.min(...fitting) : wall - offsets[0];
    }
    // In a gap: read with the later (larger) offset the time falls before the
    // change, with the earlier one after it; the change lies between, to the second.
    let before = wall - Math.max(...offsets);
    let after = wall - Math.min(...offsets);
    const early = offsetAt(before, zone);
    while (after - before > SECOND_MS) {
      const middle = before + Math.floor((after - before) / 2 / SECOND_MS) * SECOND_MS;
      if (offsetAt(middle, zone) === early) {
        before = middle;
      } else {
        after = middle;
      }
    }
    return after;
  }

  /** `YYYY-MM-DDTHH:MM:SS` on the zone's wall clock, for a datetime-local input. */
  function inputValue(milliseconds) {
    return new Date(wallClock(milliseconds)).toISOString().slice(0, 19);
  }

  /** A datetime-local input's value read in the zone; NaN when empty or bad. */
  function readInput(input) {
    const value = input.value;
    if (!value) {
      return NaN;
    }
    const wall = Date.parse(value.length === 16 ? value + ":00Z" : value + "Z");
    return Number.isFinite(wall) ? instantAt(wall) : NaN;
  }

  /** `YYYY-MM-DD HH:MM:SS` on the zone's wall clock. */
  function wallText(milliseconds) {
    return inputValue(milliseconds).replace("T", " ");
  }

  /** `+05:30`: an offset as RFC 3339 writes it (and its seconds, where it has any). */
  function offsetText(offset) {
    const sign = offset < 0 ? "-" : "+";
    const seconds = Math.abs(offset) / SECOND_MS;
    const two = (number) => String(Math.floor(number)).padStart(2, "0");
    const text = sign + two(seconds / 3600) + ":" + two((seconds % 3600) / 60);
    return seconds % 60 ? text + ":" + two(seconds % 60) : text;
  }

  /** A time as a person reads it: the wall clock, and UTC or the offset it had then. */
  function zoneText(milliseconds) {
    const suffix = state.zone === "UTC" ? "UTC" : offsetText(offsetAt(milliseconds));
    return wallText(milliseconds) + " " + suffix;
  }

  /** The window a preset names; `span` covers every record of the stations. */
  function presetWindow(preset) {
    if (preset === "span" && state.stations.length > 0) {
      const firsts = state.stations.map((station) => instant(station.first));
      const lasts = state.stations.map((station) => instant(station.last));
      const from = Math.floor(Math.min(...firsts) / SECOND_MS) * SECOND_MS;
      // The window is half-open: it must end after the last record.
      const to = Math.floor(Math.max(...lasts) / SECOND_MS) * SECOND_MS + SECOND_MS;
      return { from, to };
    }
    const now = Date.now();
    if (preset in LOCAL_DAYS) {
      const [first, end] = LOCAL_DAYS[preset];
      const today = new Date(wallClock(now));
      const [year, month, day] = [
        today.getUTCFullYear(),
        today.getUTCMonth() + 1,
        today.getUTCDate(),
      ];
      const midnight = (days) => instantAt(civil(year, month, day + days));
      return { from: midnight(first), to: midnight(end) };
    }
    const to = Math.ceil(now / SECOND_MS) * SECOND_MS;
    const hours = preset === "7d" ? 7 * 24 : 24;
    return { from: to - hours * HOUR_MS, to };
  }

  function setWindow(span) {
    state.window = span;
    ui.from.value = inputValue(span.from);
    ui.to.value = inputValue(span.to);
  }

  // ---------------------------------------------------------------- zones

  /** What a `$ref` of the OpenAPI document points at (the node itself otherwise). */
  function resolve(spec, node) {
    if (!node || typeof node.$ref !== "string" || !node.$ref.startsWith("#/")) {
      return node;
    }
    return node.$ref
      .slice(2)
      .split("/")
      .map((key) => key.replace(/~1/g, "/").replace(/~0/g, "~"))
      .reduce((parent, key) => (parent ? parent[key] : undefined), spec);
  }

  /** The zone names `tz` accepts, from stq's OpenAPI document (no token needed). */
  async function serverZones() {
    const response = await fetch("/openapi.json", {
      headers: { Accept: "application/json" },
      credentials: "omit",
    });
    if (!response.ok) {
      throw new Error(response.status + " " + response.statusText);
    }
    const spec = await response.json();
    const operation = spec.paths["/units/summary"].get;
    for (const parameter of operation.parameters.map((node) => resolve(spec, node))) {
      if (parameter && parameter.name === "tz" && parameter.in === "query") {
        const schema = resolve(spec, parameter.schema) || {};
        if (Array.isArray(schema.enum)) {
          return schema.enum;
        }
      }
    }
    throw new Error("it lists no names for tz");
  }

  function formatsIn(zone) {
    try {
      wallFormat(zone);
      return true;
    } catch (_) {
      return false;
    }
  }

  function setZone(zone) {
    state.zone = zone;
    ui.zone.value = zone;
    for (const label of document.querySelectorAll(".zone-name")) {
      label.textContent = "(" + zone + ")";
    }
  }

  function noteZone(text, fallback) {
    ui.zoneNote.textContent = text;
    ui.zoneNote.hidden = false;
    ui.zoneNote.dataset.fallback = fallback;
  }

  /**
   * Fills the zone picker with the names both stq and this browser know and picks
   * the browser's zone, or UTC (saying so) where stq does not know it.
   */
  async function loadZones() {
    const browserZone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
    let names = ["UTC"];
    let problem = null;
    try {
      names = await serverZones();
    } catch (failure) {
      problem = failure.message;
    }
    const usable = names.filter(formatsIn);
    if (!usable.includes("UTC")) {
      usable.unshift("UTC");
    }
    ui.zone.replaceChildren(...usable.map((name) => new Option(name, name)));
    if (problem !== null) {
      setZone("UTC");
      noteZone(
        "stq's list of time zones could not be read (" + problem + "): times are in UTC.",
        browserZone
      );
    } else if (usable.includes(browserZone)) {
      setZone(browserZone);
    } else {
      setZone("UTC");
      noteZone(
        "This browser's time zone, " + (browserZone || "unnamed") +
          ", is not one whose name stq knows: times are in UTC. Choose the plant's zone above.",
        browserZone
      );
    }
    ui.zone.dataset.state = "ready";
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

  const missing = (value) => value === null || value === undefined;

  function percent(fraction) {
    return missing(fraction) ? "—" : (fraction * 100).toFixed(1) + " %";
  }

  function seconds(value) {
    return missing(value) ? "—" : value.toFixed(1) + " s";
  }

  /** A statistic to six significant digits, as a chart's reader needs it. */
  function measure(value) {
    return missing(value) ? "—" : String(Number(value.toPrecision(6)));
  }

  function capability(value) {
    return missing(value) ? "—" : value.toFixed(2);
  }

  // Cpk below 1.33 (4 sigma to the nearer limit) is short of the usual target,
  // below 1 the process makes parts outside the limits.
  function capabilityClass(value) {
    if (missing(value)) {
      return "";
    }
    return value < 1 ? "bad" : value < 1.33 ? "marginal" : "";
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
      // In the page's zone like the window; the title keeps the time as the
      // station wrote it.
      cell(row, wallText(instant(station.first))).title = station.first;
      cell(row, wallText(instant(station.last))).title = station.last;
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

  /** A fraction of a units row, with the counts it comes from in its title. */
  function fractionCell(row, summary, fraction, count, what) {
    const td = cell(row, percent(summary ? summary[fraction] : null), "number");
    if (summary) {
      td.title = summary[count] + " of " + summary.units + " units " + what;
    }
  }

  /** The yield table: a row per station, or per station and day with `bucket`. */
  function renderYields(rows, bucket) {
    const byStation = new Map();
    for (const row of rows) {
      if (!byStation.has(row.station_id)) {
        byStation.set(row.station_id, []);
      }
      byStation.get(row.station_id).push(row);
    }
    const body = ui.yields.tBodies[0];
    body.replaceChildren();
    ui.yieldsDay.hidden = !bucket;
    let count = 0;
    for (const station of state.stations) {
      // A station without output records in the window keeps its row, empty.
      for (const summary of byStation.get(station.station_id) || [null]) {
        const row = stationRow(station.station_id);
        if (bucket) {
          // bucket_start is written on the zone's wall clock: its date is the day's.
          const start = summary ? summary.bucket_start : null;
          const day = cell(row, start ? start.slice(0, 10) : "—");
          if (start) {
            day.title = "from " + start;
            row.dataset.bucketStart = start;
          }
        }
        row.dataset.records = String(summary ? summary.records : 0);
        cell(row, row.dataset.records, "number");
        cell(row, String(summary ? summary.units : 0), "number");
        fractionCell(row, summary, "first_pass_yield", "first_pass", "passed at once");
        fractionCell(
          row, summary, "second_pass_yield", "second_pass", "passed by their second attempt"
        );
        fractionCell(row, summary, "final_yield", "final_pass", "passed in the end");
        fractionCell(row, summary, "retest_rate", "retested", "were tested more than once");
        const cycle = cell(row, seconds(summary ? summary.cycle_p50_s : null), "number");
        if (summary && summary.cycle_count > 0) {
          cycle.title =
            "median of " + summary.cycle_count + " cycle times (input to output); mean " +
            seconds(summary.cycle_mean_s) + ", 90th percentile " + seconds(summary.cycle_p90_s) +
            ", longest " + seconds(summary.cycle_max_s);
        }
        body.appendChild(row);
        count += 1;
      }
    }
    ui.yields.dataset.rows = String(count);
    ui.yields.dataset.state = "ready";
  }

  // The statistics beside the chart: each as [label, key of the summary row, text].
  const STATISTICS = [
    [
      "Values",
      "numeric",
      (row) => row.numeric + (row.count > row.numeric ? " of " + row.count : ""),
    ],
    ["Mean", "mean", (row) => measure(row.mean)],
    ["Std dev", "stddev", (row) => measure(row.stddev)],
    ["Min", "min", (row) => measure(row.min)],
    ["Max", "max", (row) => measure(row.max)],
    ["Lower limit", "limit_lower", (row) => row.limit_lower || "—"],
    ["Upper limit", "limit_upper", (row) => row.limit_upper || "—"],
    ["Out of limits", "out_of_limits", (row) => String(row.out_of_limits)],
    ["Failing units", "failing_units", (row) => String(row.failing_units)],
    ["Cp", "cp", (row) => capability(row.cp)],
    ["Cpk", "cpk", (row) => capability(row.cpk)],
  ];

  const CAPABILITY_NOTE =
    "from the overall sample standard deviation of the values " +
    "(Pp and Ppk in AIAG's terms)";

  /** Why a row's Cp or Cpk is what it is, for the title of its figure. */
  function capabilityTitle(row, key) {
    const numericLimit = (text) => numeric(text) !== null;
    const lower = numericLimit(row.limit_lower);
    const upper = numericLimit(row.limit_upper);
    if (!missing(row[key])) {
      const formula =
        key === "cp"
          ? "(upper - lower) / (6 x std dev)"
          : lower && upper
            ? "min(upper - mean, mean - lower) / (3 x std dev)"
            : upper
              ? "(upper - mean) / (3 x std dev), one-sided"
              : "(mean - lower) / (3 x std dev), one-sided";
      return (key === "cp" ? "Cp" : "Cpk") + " = " + formula + ", " + CAPABILITY_NOTE;
    }
    if (key === "cp" ? !(lower && upper) : !(lower || upper)) {
      return key === "cp"
        ? "needs both of the last record's limits numeric"
        : "needs a numeric limit on the last record";
    }
    return "needs a standard deviation above 0 (two values or more, not all equal)";
  }

  /** The chosen metric's statistics over the window, from /metrics/summary. */
  function renderStats(row) {
    ui.chartStats.replaceChildren();
    ui.chartStats.hidden = !row;
    if (!row) {
      return;
    }
    for (const [label, key, text] of STATISTICS) {
      const item = document.createElement("div");
      item.dataset.stat = key;
      const value = row[key];
      item.dataset.value = missing(value) ? "" : String(value);
      const term = document.createElement("dt");
      term.textContent = label;
      const figure = document.createElement("dd");
      figure.textContent = text(row);
      if (key === "cp" || key === "cpk") {
        item.title = capabilityTitle(row, key);
        item.className = capabilityClass(value);
      }
      item.append(term, figure);
      ui.chartStats.appendChild(item);
    }
  }

  /** The chosen metric per day, from /metrics/summary with `bucket`. */
  function renderChartDays(rows) {
    const body = ui.chartDays.tBodies[0];
    body.replaceChildren();
    for (const summary of rows) {
      const row = document.createElement("tr");
      row.dataset.bucketStart = summary.bucket_start;
      const day = document.createElement("th");
      day.scope = "row";
      day.textContent = summary.bucket_start.slice(0, 10);
      day.title = "from " + summary.bucket_start;
      row.appendChild(day);
      cell(row, String(summary.numeric), "number");
      cell(row, measure(summary.mean), "number");
      cell(row, measure(summary.stddev), "number");
      cell(row, String(summary.out_of_limits), "number");
      for (const key of ["cp", "cpk"]) {
        const figure = cell(row, capability(summary[key]), "number");
        figure.title = capabilityTitle(summary, key);
        const level = capabilityClass(summary[key]);
        if (level) {
          figure.classList.add(level);
        }
      }
      body.appendChild(row);
    }
    ui.chartDays.hidden = false;
    ui.chartDays.dataset.rows = String(rows.length);
    ui.chartDays.dataset.state = "ready";
  }

  function hideChartDays() {
    ui.chartDays.hidden = true;
    ui.chartDays.tBodies[0].replaceChildren();
    delete ui.chartDays.dataset.rows;
    delete ui.chartDays.dataset.state;
  }

  function renderMetricNames(rows) {
    state.metricRows = new Map(rows.map((row) => [row.name, row]));
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
      tzDate: (unixSeconds) =>
        uPlot.tzDate(new Date(unixSeconds * 1000), state.zone === "UTC" ? "Etc/UTC" : state.zone),
      scales: { x: { time: true } },
      legend: { live: true },
      series: [
        { label: "time (" + state.zone + ")" },
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

  // ---------------------------------------------------------------- control

  // Nelson's rules as /metrics/control applies them (docs/api.md section 15).
  const RULES = {
    1: "1 point beyond 3 sigma",
    2: "9 points in a row on the same side of the centre",
    3: "6 points in a row steadily increasing or decreasing",
    4: "14 points in a row alternating up and down",
    5: "2 of 3 points in a row beyond 2 sigma on the same side",
    6: "4 of 5 points in a row beyond 1 sigma on the same side",
    7: "15 points in a row within 1 sigma",
    8: "8 points in a row beyond 1 sigma, on both sides",
  };
  // How many flags a row lists at most (the contract's first 1000).
  const MAX_FLAGS = 1000;
  const CONTROL_HEIGHT = 260;
  // The steps between a point axis's ticks: whole points.
  const POINT_STEPS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10000];
  const MR_HEIGHT = 150;
  // The zones around the centre line: beyond 2 sigma (A), 1 to 2 (B), within 1 (C).
  const ZONES = [
    [3, "rgba(179, 38, 30, 0.12)"],
    [2, "rgba(230, 160, 0, 0.14)"],
    [1, "rgba(30, 125, 50, 0.10)"],
  ];

  function rulesText(rules) {
    return rules.map((rule) => rule + " (" + RULES[rule] + ")").join("; ");
  }

  function clearControl() {
    for (const plot of state.controlPlots) {
      plot.destroy();
    }
    state.controlPlots = [];
  }

  function setControl(stateName, details) {
    for (const [target, keys] of [
      [ui.controlI, ["points", "station", "metric", "rules", "violations", "limits"]],
      [ui.controlMr, ["points", "aboveUcl"]],
    ]) {
      target.dataset.state = stateName;
      const own = details ? details[target === ui.controlI ? "i" : "mr"] || {} : {};
      for (const key of keys) {
        if (key in own) {
          target.dataset[key] = String(own[key]);
        } else {
          delete target.dataset[key];
        }
      }
    }
  }

  /** The control view with nothing to draw: `text` says why. */
  function emptyControl(text, stateName = "empty", details = null) {
    clearControl();
    renderControlStats(null);
    renderFlags([], 0, 0);
    ui.controlSummary.textContent = text;
    setControl(stateName, details);
  }

  // The statistics above the control chart: each as [label, key of the row, text].
  const CONTROL_STATISTICS = [
    ["Points", "points", (row) => String(row.points)],
    ["Centre", "center", (row) => measure(row.center)],
    ["Sigma (within)", "sigma", (row) => measure(row.sigma)],
    ["UCL", "ucl", (row) => measure(row.ucl)],
    ["LCL", "lcl", (row) => measure(row.lcl)],
    ["MR mean", "mr_mean", (row) => measure(row.mr_mean)],
    ["MR UCL", "mr_ucl", (row) => measure(row.mr_ucl)],
    ["Cpk (within)", "cpk", (row) => capability(row.cpk)],
    ["Ppk", "ppk", (row) => capability(row.ppk)],
    ["Flags", "violations_count", (row) => String(row.violations_count)],
  ];

  const CONTROL_TITLES = {
    sigma: "mean moving range / 1.128",
    ucl: "centre + 3 sigma",
    lcl: "centre - 3 sigma",
    mr_ucl: "3.267 x mean moving range",
    cpk: "min(upper - centre, centre - lower) / (3 sigma), sigma from the moving ranges",
    ppk: "the same with the sample standard deviation of the values",
    violations_count: "(point, rule) pairs flagged by Nelson's rules",
  };

  function renderControlStats(row) {
    ui.controlStats.replaceChildren();
    ui.controlStats.hidden = !row;
    if (!row) {
      return;
    }
    for (const [label, key, text] of CONTROL_STATISTICS) {
      const item = document.createElement("div");
      item.dataset.stat = key;
      const value = row[key];
      item.dataset.value = missing(value) ? "" : String(value);
      if (CONTROL_TITLES[key]) {
        item.title = CONTROL_TITLES[key];
      }
      if (key === "cpk" || key === "ppk") {
        item.className = capabilityClass(value);
      } else if (key === "violations_count" && value > 0) {
        item.className = "bad";
      }
      const term = document.createElement("dt");
      term.textContent = label;
      const figure = document.createElement("dd");
      figure.textContent = text(row);
      item.append(term, figure);
      ui.controlStats.appendChild(item);
    }
  }

  /** The flagged points, a row each: its number, time, unit, value and rules. */
  function renderFlags(flagged, listed, count) {
    const body = ui.controlFlags.tBodies[0];
    body.replaceChildren();
    for (const point of flagged) {
      const row = document.createElement("tr");
      row.dataset.point = String(point.number);
      row.dataset.rules = point.rules.join(",");
      cell(row, String(point.number), "number");
      cell(row, wallText(instant(point.record.time_created))).title = point.record.time_created;
      cell(row, point.record.unit_serial || "—");
      cell(row, point.record.value, "number");
      cell(row, point.rules.join(", "), "rules").title = rulesText(point.rules);
      body.appendChild(row);
    }
    ui.controlFlagsDetails.hidden = flagged.length === 0;
    ui.controlFlagsCount.textContent =
      flagged.length + " flagged point" + (flagged.length === 1 ? "" : "s");
    ui.controlFlagsNote.textContent =
      count > listed ? "(from the first " + listed + " of " + count + " flags)" : "";
    ui.controlFlags.dataset.rows = String(flagged.length);
  }

  /** Whether a violation names this point: the record's fields as the API returns them. */
  function names(violation, record) {
    return (
      violation.time_created === record.time_created &&
      violation.station_id === record.station_id &&
      violation.unit_serial === record.unit_serial &&
      violation.value === record.value
    );
  }

  /**
   * The rules flagging each point (by index into `records`): the row's violations
   * are in point order, then rule order, so each is found at or after the last one's
   * point (after it when its rule is not above the last one's). `unmatched` counts
   * those of points the page has not fetched (a chart cut at MAX_POINTS).
   */
  function flagsOf(records, violations) {
    const flags = new Map();
    let at = 0;
    let unmatched = 0;
    for (const violation of violations) {
      const previous = flags.get(at);
      let index = previous && previous[previous.length - 1] >= violation.rule ? at + 1 : at;
      while (index < records.length && !names(violation, records[index])) {
        index += 1;
      }
      if (index >= records.length) {
        unmatched += 1;
        continue;
      }
      at = index;
      if (!flags.has(index)) {
        flags.set(index, []);
      }
      flags.get(index).push(violation.rule);
    }
    return { flags, unmatched };
  }

  /**
   * Shades the zones in the plot's area: C within 1 sigma of the centre, B from 1 to
   * 2 sigma, A from 2 to 3 sigma, on both sides.
   */
  function shadeZones(plot, row) {
    const { ctx, bbox } = plot;
    const y = (times) => plot.valToPos(row.center + times * row.sigma, "y", true);
    ctx.save();
    ctx.beginPath();
    ctx.rect(bbox.left, bbox.top, bbox.width, bbox.height);
    ctx.clip();
    for (const [times, color] of ZONES) {
      ctx.fillStyle = color;
      const inner = times - 1;
      // Above the centre, then below it; zone C is one band across it.
      for (const side of inner === 0 ? [1] : [1, -1]) {
        const far = y(side * times);
        const near = inner === 0 ? y(-times) : y(side * inner);
        ctx.fillRect(bbox.left, Math.min(far, near), bbox.width, Math.abs(near - far));
      }
    }
    ctx.restore();
  }

  /** Writes each flagged point's rule numbers beside it, away from the centre line. */
  function labelFlags(plot, row, values, flags) {
    const { ctx, bbox } = plot;
    const pixel = window.devicePixelRatio || 1;
    ctx.save();
    ctx.font = "600 " + Math.round(11 * pixel) + "px system-ui, sans-serif";
    ctx.fillStyle = "#7f1d17";
    ctx.textAlign = "center";
    for (const [index, rules] of flags) {
      const x = plot.valToPos(index + 1, "x", true);
      const y = plot.valToPos(values[index], "y", true);
      if (x < bbox.left || x > bbox.left + bbox.width) {
        continue;
      }
      const above = values[index] >= row.center;
      ctx.textBaseline = above ? "bottom" : "top";
      ctx.fillText(rules.join(","), x, y + (above ? -7 : 7) * pixel);
    }
    ctx.restore();
  }

  /** The I chart: values, centre, control limits, specification limits, flags. */
  function individualsChart(name, records, row, flags, unit) {
    const numbers = records.map((_, index) => index + 1);
    const values = records.map((record) => numeric(record.value));
    const constant = (value) => numbers.map(() => (missing(value) ? null : value));
    const flagged = values.map((value, index) => (flags.has(index) ? value : null));
    const stepped = uPlot.paths.stepped({ align: 1 });
    const line = (label, color, dash) => ({
      label,
      stroke: color,
      width: 1.5,
      dash,
      points: { show: false },
    });
    const limit = (label, color) => ({
      ...line(label, color, [6, 4]),
      paths: stepped,
    });
    const data = [
      numbers,
      values,
      constant(row.center),
      constant(row.ucl),
      constant(row.lcl),
      records.map((record) => numeric(record.limit_lower)),
      records.map((record) => numeric(record.limit_upper)),
      flagged,
    ];
    const limited = !missing(row.center) && !missing(row.sigma);
    const options = {
      width: Math.max(320, ui.controlI.clientWidth),
      height: CONTROL_HEIGHT,
      scales: { x: { time: false } },
      cursor: { sync: { key: "stq-control" } },
      legend: { live: true },
      series: [
        {
          label: "point",
          value: (_, number) =>
            missing(number) || !records[number - 1]
              ? "—"
              : number + " · " + zoneText(instant(records[number - 1].time_created)),
        },
        {
          label: name + unit,
          stroke: "#1f5fbf",
          width: 1,
          points: { show: true, size: 4, fill: "#1f5fbf" },
        },
        line("centre", "#1e7d32", []),
        line("UCL", "#b3261e", [2, 3]),
        line("LCL", "#b3261e", [2, 3]),
        limit("lower limit", "#6d7a8c"),
        limit("upper limit", "#b26a00"),
        {
          label: "flagged",
          stroke: "#b3261e",
          width: 0,
          paths: () => null,
          points: { show: true, size: 9, width: 2, stroke: "#7f1d17", fill: "#e5483d" },
        },
      ],
      axes: [{ incrs: POINT_STEPS }, { size: 60 }],
      hooks: {
        drawClear: limited ? [(plot) => shadeZones(plot, row)] : [],
        draw: [(plot) => labelFlags(plot, row, values, flags)],
      },
    };
    return new uPlot(options, data, ui.controlI);
  }

  /** The MR chart: |x(i) - x(i-1)| of the points, their mean and upper limit. */
  function movingRangeChart(values, row) {
    const numbers = values.map((_, index) => index + 1);
    const ranges = values.map((value, index) => (index === 0 ? null : Math.abs(value - values[index - 1])));
    const high = ranges.map((range) => (range !== null && !missing(row.mr_ucl) && range > row.mr_ucl ? range : null));
    const constant = (value) => numbers.map(() => (missing(value) ? null : value));
    const options = {
      width: Math.max(320, ui.controlMr.clientWidth),
      height: MR_HEIGHT,
      scales: { x: { time: false }, y: { range: (_, min, max) => [0, Math.max(max, 0) * 1.1 || 1] } },
      cursor: { sync: { key: "stq-control" } },
      legend: { live: true },
      series: [
        { label: "point" },
        {
          label: "moving range",
          stroke: "#4a5a70",
          width: 1,
          points: { show: true, size: 3, fill: "#4a5a70" },
        },
        { label: "MR mean", stroke: "#1e7d32", width: 1.5, points: { show: false } },
        { label: "MR UCL", stroke: "#b3261e", width: 1.5, dash: [2, 3], points: { show: false } },
        {
          label: "above MR UCL",
          stroke: "#b3261e",
          width: 0,
          paths: () => null,
          points: { show: true, size: 8, width: 2, stroke: "#7f1d17", fill: "#e5483d" },
        },
      ],
      axes: [{ incrs: POINT_STEPS, label: "point" }, { size: 60 }],
    };
    const plot = new uPlot(options, [numbers, ranges, constant(row.mr_mean), constant(row.mr_ucl), high], ui.controlMr);
    return { plot, ranges: values.length - 1, aboveUcl: high.filter((range) => range !== null).length };
  }

  /**
   * The control view of the chart's station and metric: the I chart and the MR
   * chart of the points fetched for the chart (`records`), with the limits and
   * flags of its /metrics/control row (`answer`: the rows, or the call's failure).
   */
  function drawControl(station, name, records, capped, answer) {
    clearControl();
    if (answer instanceof Error) {
      emptyControl(station + " · " + name + ": no control chart.", "error");
      showError(answer);
      return;
    }
    const row = answer.find((candidate) => candidate.station_id === station && candidate.name === name);
    const points = records.filter((record) => numeric(record.value) !== null);
    const details = { i: { points: 0, station, metric: name, rules: "", violations: 0 }, mr: { points: 0 } };
    if (!row || points.length === 0) {
      emptyControl(station + " · " + name + ": no numeric values in this window.", "empty", details);
      return;
    }
    const { flags, unmatched } = flagsOf(points, row.violations);
    const unit = points[0].unit ? " (" + points[0].unit + ")" : "";
    const values = points.map((record) => numeric(record.value));
    const individuals = individualsChart(name, points, row, flags, unit);
    const ranges = movingRangeChart(values, row);
    state.controlPlots = [individuals, ranges.plot];
    const flagged = [...flags.keys()].sort((a, b) => a - b).map((index) => ({
      number: index + 1,
      record: points[index],
      rules: flags.get(index),
    }));
    renderControlStats(row);
    renderFlags(flagged, row.violations.length, row.violations_count);
    const limited = !missing(row.center);
    const notes = [];
    if (!limited) {
      notes.push("no control limits: they need two values or more, not all equal");
    }
    if (capped || unmatched > 0) {
      notes.push("only the first " + points.length + " points are drawn");
    }
    ui.controlSummary.textContent =
      station + " · " + name + unit + ": " + points.length + " point" + (points.length === 1 ? "" : "s") + ", " +
      row.violations_count + " flag" + (row.violations_count === 1 ? "" : "s") + " by Nelson's rules" +
      (notes.length ? " (" + notes.join("; ") + ")" : "") +
      (limited ? "; limits from the window's moving ranges." : ".");
    const pairs = flagged.flatMap((point) => point.rules.map((rule) => point.number + ":" + rule));
    setControl("drawn", {
      i: {
        points: points.length,
        station,
        metric: name,
        rules: pairs.join(","),
        violations: row.violations_count,
        limits: limited ? "yes" : "none",
      },
      mr: { points: ranges.ranges, aboveUcl: ranges.aboveUcl },
    });
  }

  /** The distinct rules of a row's listed flags, in order. */
  function rulesBroken(row) {
    return [...new Set(row.violations.map((violation) => violation.rule))].sort((a, b) => a - b);
  }

  /**
   * The window's groups with flags, most first: the floor's Pareto of unstable
   * measurements. A click on a row shows that station's metric in the charts.
   */
  function renderUnstable(rows) {
    const unstable = rows
      .filter((row) => row.violations_count > 0)
      .sort((a, b) => b.violations_count - a.violations_count);
    const body = ui.unstable.tBodies[0];
    body.replaceChildren();
    for (const group of unstable) {
      const row = stationRow(group.station_id);
      row.dataset.metric = group.name;
      row.dataset.violations = String(group.violations_count);
      row.tabIndex = 0;
      row.title = "Show " + group.name + " of " + group.station_id + " in the charts";
      cell(row, group.name);
      cell(row, String(group.points), "number");
      cell(row, String(group.violations_count), "number");
      const rules = rulesBroken(group);
      cell(row, rules.join(", "), "rules").title = rulesText(rules);
      const first = group.violations[0];
      cell(row, first ? wallText(instant(first.time_created)) : "—").title = first ? first.time_created : "";
      for (const key of ["cpk", "ppk"]) {
        const figure = cell(row, capability(group[key]), "number");
        const level = capabilityClass(group[key]);
        if (level) {
          figure.classList.add(level);
        }
      }
      const pick = () => run(() => showMetric(group.station_id, group.name), ui.chart);
      row.addEventListener("click", pick);
      row.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          pick();
        }
      });
      body.appendChild(row);
    }
    ui.unstableEmpty.hidden = unstable.length > 0;
    ui.unstable.dataset.rows = String(unstable.length);
    ui.unstable.dataset.groups = String(rows.length);
    ui.unstable.dataset.state = "ready";
  }

  /** Every group of the window's control charts, for the Pareto of flags. */
  async function loadUnstable() {
    const current = ticket("unstable");
    ui.unstable.dataset.state = "loading";
    const path = "/metrics/control?" + query(windowParameters());
    const body = await api(path);
    if (current()) {
      renderUnstable(body.data);
      shown("unstable", path);
    }
  }

  /** Shows `name` of `station` in the chart and the control chart. */
  async function showMetric(station, name) {
    clearError();
    setChart("loading");
    ui.chartStation.value = station;
    if (!(await loadMetricNames())) {
      return;
    }
    ui.chartMetric.value = name;
    await loadChart();
    ui.controlI.scrollIntoView({ block: "nearest" });
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
    const bucket = ui.bucket.value;
    const parameters = { group_by: "station_id", ...summaryParameters(bucket) };
    const path = "/units/summary?" + query(parameters);
    const body = await api(path);
    if (current()) {
      renderYields(body.data, bucket);
      shown("yields", path);
      live.shownOutputs = body.data.reduce((sum, row) => sum + row.records, 0);
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
    const parameters = { station_ids: station, group_by: "station_id", ...summaryParameters() };
    const body = await api("/metrics/summary?" + query(parameters));
    if (!current()) {
      return false;
    }
    renderMetricNames(body.data);
    return true;
  }

  /** The chart; `quiet` when the streams brought records: no "Loading" meanwhile. */
  async function loadChart(quiet = false) {
    const current = ticket("chart");
    const station = ui.chartStation.value;
    const name = ui.chartMetric.value;
    if (!station || !name) {
      stopChart();
      clearPlot();
      renderStats(null);
      hideChartDays();
      ui.chartSummary.textContent = station
        ? station + " has no numeric metric in this window."
        : "No station to chart.";
      setChart("empty", { points: 0, series: 0, outOfLimits: 0 });
      emptyControl(ui.chartSummary.textContent);
      return;
    }
    if (!quiet) {
      // Followed again once drawn: what its stream brought was for the chart before.
      stopChart();
      setChart("loading");
      setControl("loading");
      ui.chartSummary.textContent = "Loading " + name + " of " + station + "…";
    }
    renderStats(state.metricRows.get(name));
    const bucket = ui.bucket.value;
    if (bucket) {
      if (!quiet) {
        ui.chartDays.dataset.state = "loading";
      }
    } else {
      hideChartDays();
    }
    const base = { station_ids: station, names: name, ...windowParameters(), limit: PAGE_LIMIT };
    const walk = async () => {
      const records = [];
      let cursor = null;
      do {
        const parameters = cursor === null ? base : { ...base, cursor };
        const body = await api("/metrics?" + query(parameters));
        if (!current()) {
          return null;
        }
        records.push(...body.data);
        cursor = body.meta ? body.meta.next_cursor : null;
      } while (cursor && records.length < MAX_POINTS);
      return { records: records.slice(0, MAX_POINTS), capped: Boolean(cursor) };
    };
    const days = async () => {
      if (!bucket) {
        return null;
      }
      const parameters = {
        station_ids: station,
        names: name,
        group_by: "station_id",
        ...summaryParameters(bucket),
      };
      const path = "/metrics/summary?" + query(parameters);
      return { path, rows: (await api(path)).data };
    };
    // The control chart's row of the same window; a refusal is the control
    // view's alone.
    const control = api("/metrics/control?" + query({ station_ids: station, names: name, ...windowParameters() }))
      .then((body) => body.data, (failure) => failure);
    const [points, daily, controlRows] = await Promise.all([walk(), days(), control]);
    if (!current() || points === null) {
      return;
    }
    if (daily !== null) {
      renderChartDays(daily.rows);
      shown("days", daily.path);
    }
    drawPlot(station, name, points.records, points.capped);
    drawControl(station, name, points.records, points.capped, controlRows);
    // A capped chart takes no more records.
    live.shownPoints = points.capped ? Infinity : points.records.length;
    followChart(station, name);
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

  /** The chart's metric names and the chart; `quiet` as for `loadChart`. */
  async function refreshChart(quiet = false) {
    if (!quiet) {
      clearError();
      // At once, so that what waits for the chart waits for this one.
      setChart("loading");
      setControl("loading");
    }
    await run(async () => {
      if (await loadMetricNames()) {
        await loadChart(quiet);
      }
    }, ui.chart);
  }

  function describeWindow() {
    const count = state.stations.length;
    setStatus(
      count + (count === 1 ? " station, " : " stations, ") +
        zoneText(state.window.from) + " to " + zoneText(state.window.to) +
        (state.zone === "UTC" ? "." : " (" + state.zone + ").")
    );
  }

  /** The yields and the chart of the window, then following the streams from its start. */
  async function refreshWindow() {
    clearError();
    describeWindow();
    await Promise.all([run(loadYields, ui.yields), run(loadUnstable, ui.unstable), refreshChart()]);
    followUnits();
  }

  async function loadOverview() {
    const current = ticket("overview");
    stopFollowing();
    clearError();
    clearPlot();
    clearControl();
    ui.overview.hidden = true;
    ui.stations.dataset.state = "loading";
    setStatus("Loading the stations this token sees…");
    try {
      const [body] = await Promise.all([api("/stations"), zonesLoaded]);
      if (!current()) {
        return;
      }
      state.stations = body.data;
      shown("stations", "/stations");
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

  // ---------------------------------------------------------------- live

  // The page follows two streams from the window's start (docs/api.md section
  // 14.2): /units/stream, every station the token sees, for the stations and the
  // yield table, and /metrics/stream, the chart's station and metric, for the
  // chart. The figures stay stq's: a stream tells the page that a part of the view
  // lacks records, and the page asks for that part again. The stream first sends
  // again the records the page has already shown (its backlog has no end the page
  // could see), so the page counts what the streams brought in the window against
  // what the view shows of it (the yield table's output records, the chart's
  // records), and asks again only when the streams brought more.

  // The presets whose window moves with the records: every record, and the hours
  // up to now.
  const MOVING = ["span", "24h", "7d"];
  // The indicator's words for a stream's state; of two streams, the first state
  // of this list that either is in is shown.
  const LIVE_STATES = {
    stopped: "stopped",
    reconnecting: "reconnecting",
    connecting: "connecting",
    live: "live",
  };
  const LIVE_TITLES = {
    stopped: "The page no longer follows stq: apply the window to try again.",
    reconnecting: "The connection to stq was lost; the page is trying again.",
    connecting: "Connecting to stq's streams.",
    live: "New records show as stq loads them.",
  };

  const live = {
    // Each stop of the streams takes the next epoch: a refresh of an older one
    // shows nothing.
    epoch: 0,
    // Per part ("units", "chart"): `{ scope, from, follower }`, and its state.
    streams: { units: null, chart: null },
    states: { units: "off", chart: "off" },
    // The instants of the output unit records and of the chart's metric records
    // that the streams brought, and how many of each the view shows.
    outputs: [],
    points: [],
    shownOutputs: 0,
    shownPoints: 0,
    resets: 0,
    // The parts to ask for again ("stations", "yields", "chart"), one round at a time.
    pending: new Set(),
    refreshing: false,
  };

  function showLive() {
    const states = Object.keys(live.streams)
      .filter((part) => live.streams[part])
      .map((part) => live.states[part]);
    const shown = Object.keys(LIVE_STATES).find((name) => states.includes(name));
    ui.live.hidden = !shown;
    ui.live.dataset.state = shown || "off";
    ui.live.textContent = shown ? LIVE_STATES[shown] : "";
    ui.live.title = shown ? LIVE_TITLES[shown] : "";
    ui.live.dataset.resets = String(live.resets);
  }

  function stopStream(part) {
    if (live.streams[part]) {
      live.streams[part].follower.stop();
      live.streams[part] = null;
    }
    live.states[part] = "off";
  }

  function stopFollowing() {
    live.epoch += 1;
    live.pending.clear();
    stopStream("units");
    stopStream("chart");
    showLive();
  }

  /**
   * Follows `path` with `filters` from the window's start for `part`, unless its
   * stream already does: the same filters, from the same start or an earlier one
   * (the window's start moves later with the hours up to now), and not stopped.
   */
  function followPart(part, path, filters, on) {
    if (!token()) {
      // Forgotten meanwhile.
      return;
    }
    const from = state.window.from;
    const scope = path + "?" + query(filters);
    const current = live.streams[part];
    const covered = current && current.scope === scope && current.from <= from;
    if (covered && live.states[part] !== "stopped") {
      return;
    }
    stopStream(part);
    on.restart();
    const stream = { scope, from, follower: null };
    const mine = () => live.streams[part] === stream;
    const parameters = { ...filters, from: new Date(from).toISOString() };
    live.streams[part] = stream;
    stream.follower = follow(path + "?" + query(parameters), {
      state: (name) => {
        if (mine()) {
          live.states[part] = name;
          showLive();
        }
      },
      records: (records) => {
        if (mine()) {
          on.records(records);
        }
      },
      reset: () => {
        if (mine()) {
          // What the stream brought is cleared; the view is asked for again.
          live.resets += 1;
          showLive();
          on.restart();
          refreshLive("stations", "yields", "chart");
        }
      },
      failure: (failure) => {
        if (mine()) {
          showError(failure);
        }
      },
    });
  }

  function followUnits() {
    followPart("units", "/units/stream", {}, {
      restart: () => {
        live.outputs = [];
      },
      records: unitsArrived,
    });
  }

  function followChart(station, name) {
    followPart("chart", "/metrics/stream", { station_ids: station, names: name }, {
      restart: () => {
        live.points = [];
      },
      records: pointsArrived,
    });
  }

  function stopChart() {
    stopStream("chart");
    live.points = [];
    showLive();
  }

  /** How many of `instants` the window holds. */
  function inWindow(instants) {
    const { from, to } = state.window;
    return instants.filter((at) => at >= from && at < to).length;
  }

  /** Whether a record at `at` past the window's end is in the window moved to take it. */
  function widens(at) {
    const preset = ui.preset.value;
    if (at < state.window.to || !MOVING.includes(preset)) {
      return false;
    }
    return preset === "span" || at < presetWindow(preset).to;
  }

  /** Output unit records (the stream's default direction) of any station. */
  function unitsArrived(records) {
    const known = new Set(state.stations.map((station) => station.station_id));
    let changed = false;
    for (const record of records) {
      const at = instant(record.time_created);
      live.outputs.push(at);
      changed = changed || widens(at) || !known.has(record.station_id);
    }
    if (changed || inWindow(live.outputs) > live.shownOutputs) {
      refreshLive("stations", "yields");
    }
  }

  /** Metric records of the chart's station and metric. */
  function pointsArrived(records) {
    let widened = false;
    for (const record of records) {
      const at = instant(record.time_created);
      live.points.push(at);
      widened = widened || widens(at);
    }
    if (widened) {
      // The window moves, and the yields and the chart with it.
      refreshLive("stations");
    } else if (inWindow(live.points) > live.shownPoints) {
      refreshLive("stations", "chart");
    }
  }

  /** Asks again for `parts` of the view, after what is being asked now. */
  function refreshLive(...parts) {
    for (const part of parts) {
      live.pending.add(part);
    }
    if (!live.refreshing) {
      live.refreshing = true;
      drainLive();
    }
  }

  async function drainLive() {
    const epoch = live.epoch;
    while (live.pending.size > 0 && live.epoch === epoch) {
      const parts = new Set(live.pending);
      live.pending.clear();
      if (parts.has("stations") && (await liveStations(epoch))) {
        parts.add("yields");
        parts.add("chart");
      }
      if (live.epoch !== epoch) {
        break;
      }
      await Promise.all([
        parts.has("yields") ? run(loadYields, ui.yields) : null,
        parts.has("chart") ? refreshChart(true) : null,
        // New records of either kind may have broken a rule somewhere.
        parts.has("yields") || parts.has("chart") ? run(loadUnstable, ui.unstable) : null,
      ]);
    }
    live.refreshing = false;
    if (live.pending.size > 0) {
      refreshLive();
    }
  }

  /**
   * The stations again, and the window where it moves with the records; whether
   * the window moved.
   */
  async function liveStations(epoch) {
    let body;
    try {
      body = await api("/stations");
    } catch (failure) {
      showError(failure);
      return false;
    }
    if (live.epoch !== epoch) {
      return false;
    }
    state.stations = body.data;
    renderStations();
    const moved = MOVING.includes(ui.preset.value) ? presetWindow(ui.preset.value) : state.window;
    const changed = moved.from !== state.window.from || moved.to !== state.window.to;
    if (changed) {
      setWindow(moved);
    }
    describeWindow();
    return changed;
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
    stopFollowing();
    clearPlot();
    clearControl();
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

  ui.zone.addEventListener("change", () => {
    setZone(ui.zone.value);
    // The zone is chosen now, so the browser's no longer matters.
    ui.zoneNote.hidden = true;
    if (!state.window) {
      return;
    }
    // A custom window stays the same instants, shown on the new wall clock; a
    // preset's days are the new zone's.
    setWindow(ui.preset.value === "custom" ? state.window : presetWindow(ui.preset.value));
    renderStations();
    refreshWindow();
  });

  ui.bucket.addEventListener("change", () => {
    if (state.window) {
      refreshWindow();
    }
  });

  for (const button of ui.downloads) {
    button.addEventListener("click", () => {
      clearError();
      run(() => downloadCsv(button), button);
    });
  }

  ui.chartStation.addEventListener("change", () => refreshChart());
  ui.chartMetric.addEventListener("change", () => {
    clearError();
    run(loadChart, ui.chart);
  });

  window.addEventListener("resize", () => {
    if (state.plot) {
      state.plot.setSize({ width: Math.max(320, ui.chart.clientWidth), height: 280 });
    }
    const [individuals, ranges] = state.controlPlots;
    if (individuals) {
      individuals.setSize({ width: Math.max(320, ui.controlI.clientWidth), height: CONTROL_HEIGHT });
      ranges.setSize({ width: Math.max(320, ui.controlMr.clientWidth), height: MR_HEIGHT });
    }
  });

  // The overview waits for the zones: its window and times are in the chosen one.
  const zonesLoaded = loadZones();

  if (token()) {
    ui.token.placeholder = "token set for this tab";
    loadOverview();
  }
})();
