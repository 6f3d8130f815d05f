// A sqltopic client in Node.js, written from proto/sqltopic/v1/sqltopic.proto and
// docs/protocol.md alone (no generated code: the .proto is loaded at run time).
//
// Usage: node client.js HOST:PORT
//
// It prints one JSON object per line ({"step": ..., ...}) for the test to check, and in
// the middle prints {"step": "kill"} and waits for a line on stdin: the test kills the
// server (SIGKILL) and restarts it on the same data directory and port, then writes
// that line. Any failure is printed as {"step": "error", ...} with exit code 1.
"use strict";

const path = require("path");
const readline = require("readline");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");
const arrow = require("apache-arrow");

const ADDRESS = process.argv[2];
const PROTO_ROOT = path.resolve(__dirname, "..", "..", "proto");
// Every call has a deadline; a server on localhost answers well within it.
const CALL_MS = 15000;
const LOAD = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true };
const CHANNEL = { "grpc.max_receive_message_length": 64 << 20 };
const DB = "nodedb";
const TOPIC = "node_volts";
const GROUP = "node_group";
const TABLES = ["t1", "t2", "t3", "t4"];
const ROWS_PER_TABLE = 5;

const v1 = grpc.loadPackageDefinition(
  protoLoader.loadSync("sqltopic/v1/sqltopic.proto", { ...LOAD, includeDirs: [PROTO_ROOT] }),
).sqltopic.v1;
const reflection = grpc.loadPackageDefinition(
  protoLoader.loadSync(path.join(__dirname, "reflection_v1.proto"), LOAD),
).grpc.reflection.v1;

const creds = grpc.credentials.createInsecure();
const session = new v1.Session(ADDRESS, creds, CHANNEL);
const sql = new v1.Sql(ADDRESS, creds, CHANNEL);
const mnode = new v1.Mnode(ADDRESS, creds, CHANNEL);
const vnode = new v1.Vnode(ADDRESS, creds, CHANNEL);
let md = null; // the call metadata with the token

function report(step, fields) {
  process.stdout.write(JSON.stringify({ step, ...fields }) + "\n");
}

function options() {
  // waitForReady: after the server restarts, calls wait for the channel to reconnect
  return { deadline: Date.now() + CALL_MS, waitForReady: true };
}

function unary(client, method, request, metadata = md) {
  return new Promise((resolve, reject) => {
    const callback = (err, answer) => (err ? reject(err) : resolve(answer));
    if (metadata) client[method](request, metadata, options(), callback);
    else client[method](request, options(), callback);
  });
}

function errorOf(err) {
  const name = err.metadata ? err.metadata.get("sqltopic-error")[0] : undefined;
  return { code: grpc.status[err.code], error: name || null, details: err.details };
}

async function expectError(promise) {
  try {
    await promise;
  } catch (err) {
    return errorOf(err);
  }
  throw new Error("the call succeeded; an error was expected");
}

async function listServices() {
  const call = new reflection.ServerReflection(ADDRESS, creds).ServerReflectionInfo(options());
  const answers = [];
  const done = new Promise((resolve, reject) => {
    call.on("data", (answer) => answers.push(answer));
    call.on("end", resolve);
    call.on("error", reject);
  });
  call.write({ list_services: "*" });
  call.end();
  await done;
  return answers[0].list_services_response.service.map((s) => s.name).sort();
}

async function login() {
  const answer = await unary(session, "Login", { user: "root", password: "taosdata", client_name: "node-test" }, null);
  const metadata = new grpc.Metadata();
  metadata.set("authorization", `bearer ${answer.token}`); // lower case: RFC 7235
  md = metadata;
  return answer;
}

async function run(text) {
  const answer = await unary(sql, "Run", { sql: text });
  return { affected: Number(answer.header.affected_rows), rows: Number(answer.header.row_count) };
}

async function insertRows(base) {
  const values = [];
  for (const [n, table] of TABLES.entries()) {
    const rows = [];
    for (let i = 0; i < ROWS_PER_TABLE; i++) {
      rows.push(`(${1700000000000 + base * 100 + i}, ${base + n * 10 + i})`);
      values.push(base + n * 10 + i);
    }
    await run(`INSERT INTO ${DB}.${table} USING ${DB}.meters TAGS (${n}) VALUES ${rows.join(" ")}`);
  }
  return values;
}

// Poll (server streaming): one message in one or more frames. Blocks decoded with Arrow.
function poll(request) {
  return new Promise((resolve, reject) => {
    const frames = [];
    const call = vnode.Poll(request, md, options());
    call.on("data", (frame) => frames.push(frame));
    call.on("error", reject); // a failed call's status
    call.on("status", (status) => {
      if (status.code === grpc.status.OK) resolve(decode(frames));
    });
  });
}

async function fetch(request) {
  return decode([await unary(vnode, "Fetch", request)]);
}

function decode(frames) {
  const head = frames[0];
  const message = head[head.message];
  const parts = new Map();
  for (const frame of frames) {
    for (const part of frame.blocks) {
      if (!parts.has(part.block)) parts.set(part.block, []);
      parts.get(part.block).push(part.arrow_ipc);
    }
  }
  const volts = [];
  for (const block of [...parts.keys()].sort((a, b) => a - b)) {
    const table = arrow.tableFromIPC(Buffer.concat(parts.get(block)));
    for (const v of table.getChild("voltage").toArray()) volts.push(Number(v));
  }
  return {
    kind: head.message, offset: Number(message.offset), end: Number(message.end_offset),
    epoch: Number(head.epoch), rows: message.row_count === undefined ? 0 : Number(message.row_count),
    volts,
  };
}

function pollRequest(consumer, vgroup, epoch, position) {
  const request = {
    consumer_id: consumer, group_id: GROUP, topic: TOPIC, vgroup, epoch: String(epoch),
    auto_offset_reset: "OFFSET_RESET_EARLIEST", max_wait_ms: 0,
  };
  if (position !== undefined) request.position = String(position);
  return request;
}

// Reads a vgroup from the group's committed offset to the end; commits the position.
async function drain(consumer, vgroup, epoch, useFetch) {
  const volts = [];
  let position;
  let messages = 0;
  for (;;) {
    const request = pollRequest(consumer, vgroup, epoch, position);
    const message = useFetch ? await fetch(request) : await poll(request);
    if (message.kind === "data_lost") throw new Error(`data_lost on vgroup ${vgroup}`);
    volts.push(...message.volts);
    messages += 1;
    const moved = position !== message.end;
    position = message.end;
    if (message.kind === "empty" && !moved) break;
  }
  await unary(vnode, "Commit", {
    consumer_id: consumer, group_id: GROUP, epoch: String(epoch),
    offsets: [{ topic: TOPIC, vgroup, offset: String(position) }],
  });
  return { volts, position, messages };
}

async function subscribe(clientId) {
  return unary(mnode, "Subscribe", {
    group_id: GROUP, client_id: clientId, topics: [TOPIC],
    auto_offset_reset: "OFFSET_RESET_EARLIEST", session_timeout_ms: 60000,
    max_poll_interval_ms: 600000,
  });
}

function vgroupsOf(assignment) {
  return assignment.assignments.map((a) => a.vgroup).sort((a, b) => a - b);
}

async function waitForLine() {
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    lines.close();
    return line;
  }
  throw new Error("stdin closed before the server restarted");
}

async function main() {
  report("reflection", { services: await listServices() });
  const first = await login();
  report("login", { user: first.user, max_chunk_bytes: first.max_chunk_bytes });

  const ddl = [];
  for (const text of [
    `CREATE DATABASE ${DB} VGROUPS 2`,
    `CREATE STABLE ${DB}.meters (ts TIMESTAMP, voltage INT) TAGS (groupid INT)`,
    `CREATE TOPIC ${TOPIC} AS SELECT ts, voltage FROM ${DB}.meters`,
  ]) ddl.push((await run(text)).affected);
  const written = await insertRows(100);
  report("sql", { ddl_affected: ddl, written: written.length });

  // two consumers of one group: c2's join revokes one vgroup from c1, which lets go of
  // it by a heartbeat that no longer lists it
  const c1 = await subscribe("node-c1");
  const a1 = await unary(mnode, "GetAssignment", { consumer_id: c1.consumer_id, known_epoch: "0" });
  const c2 = await subscribe("node-c2");
  const a1b = await unary(mnode, "GetAssignment", { consumer_id: c1.consumer_id, known_epoch: a1.epoch });
  await unary(mnode, "Heartbeat", {
    consumer_id: c1.consumer_id, epoch: a1b.epoch, polled: true,
    progress: a1b.assignments.map((a) => ({ topic: TOPIC, vgroup: a.vgroup, rows: "0" })),
  });
  const a2 = await unary(mnode, "GetAssignment", { consumer_id: c2.consumer_id, known_epoch: "0" });
  report("assign", {
    c1_first: vgroupsOf(a1), c2_status: c2.status, c1_after: vgroupsOf(a1b),
    c1_epoch_rose: Number(a1b.epoch) > Number(a1.epoch), c2: vgroupsOf(a2),
  });

  const got1 = await drain(c1.consumer_id, a1b.assignments[0].vgroup, a1b.epoch, false);
  const got2 = await drain(c2.consumer_id, a2.assignments[0].vgroup, a2.epoch, true);
  const committed = await unary(vnode, "Committed", {
    group_id: GROUP,
    vgroups: [a1b, a2].map((a) => ({ topic: TOPIC, vgroup: a.assignments[0].vgroup })),
  });
  report("consume", {
    c1: got1.volts.sort((x, y) => x - y), c2: got2.volts.sort((x, y) => x - y),
    written: written.sort((x, y) => x - y),
    positions: [got1.position, got2.position],
    committed: committed.offsets.map((o) => Number(o.offset)),
  });

  const zero = await poll(pollRequest(c1.consumer_id, a1b.assignments[0].vgroup, a1b.epoch, 0));
  const fenced = await expectError(
    poll(pollRequest(c2.consumer_id, a2.assignments[0].vgroup, Number(a2.epoch) + 5)),
  );
  report("positions", { zero_kind: zero.kind, zero_offset: zero.offset, invented_epoch: fenced });

  // c2 unsubscribes: its epoch rises, so GetAssignment(known) is not `unchanged`
  const un = await unary(mnode, "Unsubscribe", { consumer_id: c2.consumer_id });
  const a2b = await unary(mnode, "GetAssignment", { consumer_id: c2.consumer_id, known_epoch: a2.epoch });
  const beat = await unary(mnode, "Heartbeat", { consumer_id: c1.consumer_id, epoch: a1b.epoch, polled: true });
  const a1c = await unary(mnode, "GetAssignment", { consumer_id: c1.consumer_id, known_epoch: a1b.epoch });
  report("unsubscribe", {
    epoch_rose: Number(un.epoch) > Number(a2.epoch), unchanged: a2b.unchanged,
    left: vgroupsOf(a2b), c1_refresh: beat.refresh_assignment, c1: vgroupsOf(a1c),
  });

  // the server is killed and restarted: groups and committed offsets survive it
  report("kill", {});
  await waitForLine();
  const stale = await expectError(unary(sql, "Run", { sql: "SHOW DATABASES" }));
  await login();
  const later = await insertRows(1000);
  const again = await unary(mnode, "Heartbeat", { consumer_id: c1.consumer_id, epoch: a1c.epoch, polled: true });
  const volts = [];
  for (const a of a1c.assignments) {
    volts.push(...(await drain(c1.consumer_id, a.vgroup, a1c.epoch, false)).volts);
  }
  report("takeover", {
    stale_token: stale, status: again.status, epoch_kept: again.epoch === a1c.epoch,
    rows: volts.sort((x, y) => x - y), written: later.sort((x, y) => x - y),
  });

  await unary(mnode, "CloseConsumer", { consumer_id: c1.consumer_id });
  await unary(mnode, "CloseConsumer", { consumer_id: c2.consumer_id });
  const gone = await unary(mnode, "GetAssignment", { consumer_id: c1.consumer_id, known_epoch: a1c.epoch });
  report("close", { status: gone.status, epoch: gone.epoch, unchanged: gone.unchanged });
  report("done", {});
}

main().then(
  () => process.exit(0),
  (err) => {
    report("error", { message: String(err && err.stack ? err.stack : err), ...(err.code ? errorOf(err) : {}) });
    process.exit(1);
  },
);
