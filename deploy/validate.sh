#!/usr/bin/env bash
# Validates the deployment files offline (no Docker engine, no Azure login):
#
#   docker-compose.yml          `docker compose config -q` (or Debian's
#                               docker-compose 1.29, installed if missing),
#                               then dclint's Compose-spec schema check
#   Dockerfile                  dockerfile-utils lint
#   deploy/azure/azuredeploy.json
#                               deploy/azure/check-template.mjs (JSON, ARM
#                               expression syntax, references, leasecron's
#                               requirements)
#   deploy/compose/leasecron.yaml
#                               YAML parse
#   cross-file consistency      Azurite image tag = package.json's azurite,
#                               Go image = go.mod's Go, shutdown grace <
#                               stop_grace_period
#
# The npm tools are pinned and installed into $LEASECRON_TOOLS_DIR (default
# ~/.cache/leasecron-tools), never into the repository. `make lint` runs this.
set -euo pipefail
cd "$(dirname "$0")/.."

DCLINT_VERSION=3.1.0
DOCKERFILE_UTILS_VERSION=0.16.3
YAML_VERSION=2.9.1
TOOLS=${LEASECRON_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/leasecron-tools}

step() { printf '== %s\n' "$*"; }
die() { printf 'deploy/validate.sh: %s\n' "$*" >&2; exit 1; }

command -v node >/dev/null || die "Node.js is required (apt-get install -y nodejs npm)"

# --- tools -------------------------------------------------------------------
compose=()
if docker compose version >/dev/null 2>&1; then
	compose=(docker compose)
elif command -v docker-compose >/dev/null; then
	compose=(docker-compose)
elif command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
	step "installing Debian's docker-compose (validator only; no engine needed)"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-compose >/dev/null
	compose=(docker-compose)
else
	die "need 'docker compose' or 'docker-compose' to validate docker-compose.yml (Debian: apt-get install docker-compose)"
fi

want="dclint@$DCLINT_VERSION dockerfile-utils@$DOCKERFILE_UTILS_VERSION yaml@$YAML_VERSION"
if [ "$(cat "$TOOLS/.versions" 2>/dev/null)" != "$want" ]; then
	command -v npm >/dev/null || die "npm is required to install the validators"
	step "installing $want into $TOOLS"
	mkdir -p "$TOOLS"
	# shellcheck disable=SC2086
	npm install --prefix "$TOOLS" --no-audit --no-fund --loglevel=error $want >/dev/null
	echo "$want" >"$TOOLS/.versions"
fi

# --- docker-compose.yml --------------------------------------------------------
step "docker-compose.yml: ${compose[*]} config -q"
"${compose[@]}" -f docker-compose.yml config -q
step "docker-compose.yml: dclint $DCLINT_VERSION (Compose-spec schema; errors only)"
"$TOOLS/node_modules/.bin/dclint" --quiet --color=false docker-compose.yml

# --- Dockerfile ----------------------------------------------------------------
step "Dockerfile: dockerfile-utils $DOCKERFILE_UTILS_VERSION lint"
"$TOOLS/node_modules/.bin/dockerfile-utils" lint Dockerfile

# --- Azure template ------------------------------------------------------------
step "deploy/azure/azuredeploy.json: check-template.mjs"
node deploy/azure/check-template.mjs deploy/azure/azuredeploy.json

# --- sample configuration and consistency --------------------------------------
step "deploy/compose/leasecron.yaml and cross-file consistency"
NODE_PATH="$TOOLS/node_modules" node - <<'EOF'
const fs = require("fs");
const YAML = require("yaml");
const problems = [];
const load = (f) => {
  const doc = YAML.parseDocument(fs.readFileSync(f, "utf8"), { merge: true });
  if (doc.errors.length) problems.push(`${f}: ${doc.errors.map((e) => e.message).join("; ")}`);
  return doc.toJS({ maxAliasCount: -1 }) ?? {};
};
const seconds = (d) => {
  const m = /^(\d+)(s|m)$/.exec(String(d ?? ""));
  return m ? Number(m[1]) * (m[2] === "m" ? 60 : 1) : NaN;
};
const cfg = load("deploy/compose/leasecron.yaml");
const compose = load("docker-compose.yml");
const pkg = JSON.parse(fs.readFileSync("package.json", "utf8"));

const azuriteImage = compose.services?.azurite?.image ?? "";
const pinned = pkg.devDependencies?.azurite;
if (!azuriteImage.endsWith(`:${pinned}`)) problems.push(`azurite image ${azuriteImage} differs from package.json azurite ${pinned}`);

const goMod = /^go (\d+\.\d+)/m.exec(fs.readFileSync("go.mod", "utf8"))?.[1];
const goImage = /^ARG GO_VERSION=(\S+)/m.exec(fs.readFileSync("Dockerfile", "utf8"))?.[1];
if (!goMod || goImage !== goMod) problems.push(`Dockerfile GO_VERSION ${goImage} differs from go.mod's go ${goMod}`);

const grace = seconds(cfg.worker?.shutdown_grace);
for (const [name, svc] of Object.entries(compose.services ?? {})) {
  if (!name.startsWith("worker")) continue;
  const stop = seconds(svc.stop_grace_period);
  if (!(grace < stop)) problems.push(`${name}: stop_grace_period ${svc.stop_grace_period} must exceed worker.shutdown_grace ${cfg.worker?.shutdown_grace}`);
  const cs = svc.environment?.LEASECRON_STORAGE_CONNECTION_STRING ?? "";
  for (const [svcName, port] of [["Blob", 10000], ["Queue", 10001], ["Table", 10002]]) {
    if (!cs.includes(`${svcName}Endpoint=http://azurite:${port}/devstoreaccount1`)) problems.push(`${name}: ${svcName}Endpoint does not point at azurite:${port}`);
  }
  if (svc.environment?.LEASECRON_ADMIN_ADDR !== ":8080") problems.push(`${name}: LEASECRON_ADMIN_ADDR is not :8080`);
}
const scheduled = (compose.services?.scheduler?.command ?? []);
const type = scheduled[scheduled.indexOf("--type") + 1];
if (!cfg.handlers?.[type]) problems.push(`scheduler schedules type "${type}" but leasecron.yaml has no handler for it`);

if (problems.length) { for (const p of problems) console.error(p); process.exit(1); }
console.log(`ok (azurite ${pinned}, go ${goMod}, shutdown grace ${grace}s, handler types: ${Object.keys(cfg.handlers ?? {}).join(", ")})`);
EOF

step "deployment files valid"
