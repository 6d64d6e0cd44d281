// The shard of a task id (README, "Sharding"): node shard.mjs COUNT ID...
function shard(id, shards) {
  let h = 0x811c9dc5;
  for (const b of new TextEncoder().encode(id)) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return String(h % shards).padStart(2, "0");
}

const n = Number(process.argv[2]);
for (const id of process.argv.slice(3)) console.log(shard(id, n));
