#!/usr/bin/env node
// Offline checks of deploy/azure/azuredeploy.json (no Azure access needed):
//
//   1. structure: schema, contentVersion, every resource has type, apiVersion
//      and name; parameter defaults match their type and allowed values;
//   2. expressions: every "[...]" string parses as an ARM template
//      expression, calls only known template functions, and every
//      parameters('x') / variables('x') names something declared; declared
//      parameters and variables are all used; dependsOn names resolve;
//   3. leasecron's requirements: the storage data roles by their built-in
//      GUIDs, the managed-identity queue scale rule on leasecron-work,
//      probes on /healthz and /readyz, min replicas >= 1, a termination
//      grace period, and the worker's environment.
//
// It is a linter, not Azure's validator: `az deployment group validate`
// (see README.md) remains the authority.
//
// Usage: node check-template.mjs [azuredeploy.json]

import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const file = process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), "azuredeploy.json");
const problems = [];
const fail = (msg) => problems.push(msg);

let tpl;
try {
  tpl = JSON.parse(readFileSync(file, "utf8"));
} catch (e) {
  console.error(`${file}: not valid JSON: ${e.message}`);
  process.exit(1);
}

// ARM template functions (resource-group deployments).
const FUNCTIONS = new Set([
  // array / object
  "array", "concat", "contains", "createArray", "createObject", "empty", "first", "flatten", "indexOf",
  "intersection", "items", "join", "json", "last", "lastIndexOf", "length", "max", "min", "null", "objectKeys",
  "range", "shallowMerge", "skip", "take", "tryGet", "union",
  // comparison / logical
  "coalesce", "equals", "greater", "greaterOrEquals", "less", "lessOrEquals", "and", "bool", "false", "if", "not", "or", "true",
  // deployment
  "deployment", "environment", "parameters", "variables",
  // numeric
  "add", "copyIndex", "div", "float", "int", "mod", "mul", "sub",
  // resource
  "extensionResourceId", "list", "listKeys", "listSecrets", "listAccountSas", "pickZones", "providers", "reference",
  "references", "resourceGroup", "resourceId", "subscription", "subscriptionResourceId", "managementGroupResourceId",
  "tenantResourceId", "managementGroup", "tenant",
  // string
  "base64", "base64ToJson", "base64ToString", "dataUri", "dataUriToString", "endsWith", "format", "guid", "lastIndexOf",
  "newGuid", "padLeft", "replace", "split", "startsWith", "string", "substring", "toLower", "toUpper", "trim",
  "uniqueString", "uri", "uriComponent", "uriComponentToString", "utcNow", "dateTimeAdd", "dateTimeFromEpoch",
  "dateTimeToEpoch",
]);

// Function names are case-insensitive.
const FUNCTION_NAMES = new Set([...FUNCTIONS].map((f) => f.toLowerCase()));

// --- expression parser --------------------------------------------------
// Grammar: expr := primary ( '.' ident | '[' expr ']' )*
//          primary := ident '(' [expr (',' expr)*] ')' | 'string' | number
function parseExpression(src) {
  let i = 0;
  const calls = [];
  const ws = () => { while (i < src.length && /\s/.test(src[i])) i++; };
  const err = (m) => { throw new Error(`${m} at offset ${i} in [${src}]`); };
  const ident = () => {
    const m = /^[A-Za-z_][A-Za-z0-9_]*/.exec(src.slice(i));
    if (!m) err("expected a name");
    i += m[0].length;
    return m[0];
  };
  function primary() {
    ws();
    if (src[i] === "'") {
      let s = "";
      i++;
      for (;;) {
        if (i >= src.length) err("unterminated string");
        if (src[i] === "'") {
          if (src[i + 1] === "'") { s += "'"; i += 2; continue; }
          i++;
          break;
        }
        s += src[i++];
      }
      return { kind: "string", value: s };
    }
    const num = /^-?\d+(\.\d+)?/.exec(src.slice(i));
    if (num) { i += num[0].length; return { kind: "number", value: Number(num[0]) }; }
    const name = ident();
    ws();
    if (src[i] !== "(") err(`expected '(' after ${name}`);
    i++;
    const args = [];
    ws();
    if (src[i] === ")") { i++; } else {
      for (;;) {
        args.push(expr());
        ws();
        if (src[i] === ",") { i++; continue; }
        if (src[i] === ")") { i++; break; }
        err("expected ',' or ')'");
      }
    }
    const call = { kind: "call", name, args };
    calls.push(call);
    return call;
  }
  function expr() {
    let e = primary();
    for (;;) {
      ws();
      if (src[i] === ".") { i++; ws(); e = { kind: "member", of: e, name: ident() }; continue; }
      if (src[i] === "[") { i++; const idx = expr(); ws(); if (src[i] !== "]") err("expected ']'"); i++; e = { kind: "index", of: e, idx }; continue; }
      return e;
    }
  }
  const tree = expr();
  ws();
  if (i !== src.length) err("unexpected text after the expression");
  return { tree, calls };
}

// --- walk every string ---------------------------------------------------
const usedParams = new Set();
const usedVars = new Set();
const params = tpl.parameters ?? {};
const vars = tpl.variables ?? {};

function checkString(s, where) {
  if (!(s.startsWith("[") && s.endsWith("]")) || s.startsWith("[[")) return;
  let parsed;
  try {
    parsed = parseExpression(s.slice(1, -1));
  } catch (e) {
    fail(`${where}: ${e.message}`);
    return;
  }
  for (const c of parsed.calls) {
    if (!FUNCTION_NAMES.has(c.name.toLowerCase())) fail(`${where}: unknown template function ${c.name}()`);
    const fn = c.name.toLowerCase();
    if (fn === "parameters" || fn === "variables") {
      const a = c.args[0];
      if (c.args.length !== 1 || a.kind !== "string") {
        fail(`${where}: ${c.name}() needs one literal name`);
        continue;
      }
      const table = fn === "parameters" ? params : vars;
      if (!(a.value in table)) fail(`${where}: ${c.name}('${a.value}') is not declared`);
      (fn === "parameters" ? usedParams : usedVars).add(a.value);
    }
  }
}

function walk(v, where) {
  if (typeof v === "string") return checkString(v, where);
  if (Array.isArray(v)) return v.forEach((x, k) => walk(x, `${where}[${k}]`));
  if (v && typeof v === "object") {
    for (const [k, x] of Object.entries(v)) {
      checkString(k, `${where} key ${k}`);
      walk(x, `${where}.${k}`);
    }
  }
}

// --- 1. structure --------------------------------------------------------
if (!/^https:\/\/schema\.management\.azure\.com\/schemas\/\d{4}-\d{2}-\d{2}\/deploymentTemplate\.json#$/.test(tpl.$schema ?? "")) {
  fail(`$schema ${JSON.stringify(tpl.$schema)} is not a resource-group deployment template schema`);
}
if (!/^\d+\.\d+\.\d+\.\d+$/.test(tpl.contentVersion ?? "")) fail(`contentVersion ${JSON.stringify(tpl.contentVersion)} is not n.n.n.n`);
const allowedKeys = new Set(["$schema", "contentVersion", "metadata", "parameters", "variables", "functions", "resources", "outputs", "apiProfile"]);
for (const k of Object.keys(tpl)) if (!allowedKeys.has(k)) fail(`unknown top-level property ${k}`);
if (!Array.isArray(tpl.resources) || tpl.resources.length === 0) fail("no resources");

const TYPES = { string: "string", securestring: "string", int: "number", bool: "boolean", object: "object", secureobject: "object", array: "array" };
for (const [name, p] of Object.entries(params)) {
  const want = TYPES[(p.type ?? "").toLowerCase()];
  if (!want) { fail(`parameter ${name}: unknown type ${p.type}`); continue; }
  if ("defaultValue" in p) {
    const d = p.defaultValue;
    const isExpr = typeof d === "string" && d.startsWith("[") && d.endsWith("]");
    const got = Array.isArray(d) ? "array" : typeof d;
    if (!isExpr && got !== want) fail(`parameter ${name}: default ${JSON.stringify(d)} is not of type ${p.type}`);
    if (p.allowedValues && !isExpr && !p.allowedValues.includes(d)) fail(`parameter ${name}: default ${JSON.stringify(d)} not in allowedValues`);
    if (typeof d === "number" && ((p.minValue !== undefined && d < p.minValue) || (p.maxValue !== undefined && d > p.maxValue))) {
      fail(`parameter ${name}: default ${d} outside [${p.minValue}, ${p.maxValue}]`);
    }
  }
}

const loopNames = new Set();
const resourceNames = new Set();
tpl.resources.forEach((r, k) => {
  const where = `resources[${k}] (${r.type ?? "?"})`;
  for (const f of ["type", "apiVersion", "name"]) if (typeof r[f] !== "string" || r[f] === "") fail(`${where}: missing ${f}`);
  if (r.apiVersion && !/^\d{4}-\d{2}-\d{2}(-preview)?$/.test(r.apiVersion)) fail(`${where}: apiVersion ${r.apiVersion} malformed`);
  if (r.type && !/^[A-Za-z.]+\/[A-Za-z]+(\/[A-Za-z]+)*$/.test(r.type)) fail(`${where}: type ${r.type} malformed`);
  if (r.copy) loopNames.add(r.copy.name);
  if (typeof r.name === "string" && !r.name.startsWith("[")) resourceNames.add(r.name);
});
tpl.resources.forEach((r, k) => {
  for (const d of r.dependsOn ?? []) {
    if (typeof d !== "string") { fail(`resources[${k}]: dependsOn entry ${JSON.stringify(d)} not a string`); continue; }
    if (!d.startsWith("[") && !loopNames.has(d) && !resourceNames.has(d)) fail(`resources[${k}]: dependsOn ${d} names no resource or copy loop`);
  }
});

// --- 2. expressions ------------------------------------------------------
walk(tpl.variables, "variables");
walk(tpl.resources, "resources");
walk(tpl.outputs, "outputs");
for (const [name, p] of Object.entries(params)) walk(p.defaultValue, `parameters.${name}.defaultValue`);
// Variables used only by other variables count as used.
for (const name of Object.keys(params)) if (!usedParams.has(name)) fail(`parameter ${name} is never used`);
for (const name of Object.keys(vars)) if (!usedVars.has(name)) fail(`variable ${name} is never used`);

// --- 3. leasecron requirements --------------------------------------------
const text = JSON.stringify(tpl);
const ROLES = {
  "Storage Blob Data Contributor": "ba92f5b4-2d11-453d-a403-e96b0029c9fe",
  "Storage Queue Data Contributor": "974c5e8b-45b9-4653-ba55-5f855dd0fb88",
  "Storage Table Data Contributor": "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3",
};
for (const [role, id] of Object.entries(ROLES)) if (!text.includes(id)) fail(`role ${role} (${id}) is not assigned`);

const byType = (t) => tpl.resources.filter((r) => r.type === t);
const apps = byType("Microsoft.App/containerApps");
if (apps.length !== 1) fail(`want one Microsoft.App/containerApps, found ${apps.length}`);
for (const app of apps) {
  if (app.apiVersion < "2025-01-01") fail(`containerApps apiVersion ${app.apiVersion}: scale-rule identity needs 2025-01-01 or later (or 2024-02-02-preview)`);
  if (app.identity?.type !== "UserAssigned") fail("container app has no user-assigned identity");
  const t = app.properties?.template ?? {};
  if (t.terminationGracePeriodSeconds === undefined) fail("template.terminationGracePeriodSeconds is not set");
  // The worker's shutdown grace is the termination grace less a margin; a
  // grace of 0s or less is refused by the worker (worker.shutdown_grace),
  // which would then restart for good: the parameter's least value must
  // leave at least 1 s.
  const grace = /sub\(parameters\('(\w+)'\), (\d+)\)/.exec(String(vars.shutdownGrace ?? ""));
  if (!grace) fail("variables.shutdownGrace is not sub(parameters('…'), N)");
  else if (!(params[grace[1]]?.minValue - Number(grace[2]) >= 1)) fail(`parameter ${grace[1]}: minValue ${params[grace[1]]?.minValue} less ${grace[2]} leaves worker.shutdown_grace under 1s, which the worker refuses`);
  const scale = t.scale ?? {};
  const minRef = /parameters\('(\w+)'\)/.exec(String(scale.minReplicas))?.[1];
  const minVal = minRef ? params[minRef]?.defaultValue : scale.minReplicas;
  if (!(minVal >= 1)) fail(`minReplicas ${JSON.stringify(scale.minReplicas)} must default to >= 1 (someone must hold the lease)`);
  if (minRef && !(params[minRef]?.minValue >= 1)) fail(`parameter ${minRef} must have minValue >= 1`);
  // A custom azure-queue rule: the built-in azureQueue rule counts
  // invisible messages too, and tasks enqueued early wait invisibly for
  // their due time; queueLengthStrategy visibleonly counts only due work.
  const r = (scale.rules ?? []).map((r) => r.custom).find((c) => c?.type === "azure-queue");
  if (!r) fail("no custom azure-queue scale rule");
  else {
    const q = r.metadata ?? {};
    if (!q.accountName) fail("azure-queue scale rule lacks accountName (needed with a managed identity)");
    if (!r.identity) fail("azure-queue scale rule lacks identity");
    if (r.auth) fail("azure-queue scale rule uses secrets (auth) instead of the identity");
    if (q.queueLengthStrategy !== "visibleonly") fail("azure-queue scale rule must count visible messages only (queueLengthStrategy visibleonly): tasks enqueued early wait invisibly");
    const qn = /variables\('(\w+)'\)/.exec(String(q.queueName))?.[1];
    if ((qn ? vars[qn] : q.queueName) !== "leasecron-work") fail(`scale rule queue ${q.queueName} is not leasecron-work`);
  }
  const c = (t.containers ?? [])[0] ?? {};
  const probes = Object.fromEntries((c.probes ?? []).map((p) => [p.type, p.httpGet ?? {}]));
  if (probes.Liveness?.path !== "/healthz" || probes.Liveness?.port !== 8080) fail("no Liveness probe on :8080/healthz");
  if (probes.Readiness?.path !== "/readyz" || probes.Readiness?.port !== 8080) fail("no Readiness probe on :8080/readyz");
  const env = String(c.env);
  for (const v of ["LEASECRON_STORAGE_ACCOUNT", "AZURE_CLIENT_ID", "LEASECRON_ADMIN_ADDR"]) if (!env.includes(`'${v}'`)) fail(`container env lacks ${v}`);
  if (!env.includes("'LEASECRON_ADMIN_ADDR', 'value', ':8080'")) fail("LEASECRON_ADMIN_ADDR is not :8080");
}
const queues = byType("Microsoft.Storage/storageAccounts/queueServices/queues");
if (!queues.some((r) => r.name.includes("workQueue"))) fail("the work queue is not created");

if (problems.length) {
  for (const p of problems) console.error(`${file}: ${p}`);
  console.error(`${problems.length} problem(s)`);
  process.exit(1);
}
const exprs = (text.match(/"\[[^\[]/g) ?? []).length;
console.log(`${file}: ok (${tpl.resources.length} resources, ${Object.keys(params).length} parameters, ${Object.keys(vars).length} variables, ${exprs} expressions checked)`);
