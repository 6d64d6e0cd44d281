// Inserts one ScheduledItems row the way a Node.js program would, with the
// @azure/data-tables SDK and a W3C TraceParent — the cross-language half of
// TestTraceFromNodeRow.
//
//   node insert-traced-row.mjs CONNECTION_STRING TABLE ROW_KEY TYPE TRACEPARENT
import { TableClient } from "@azure/data-tables";

const [conn, table, rowKey, type, traceParent] = process.argv.slice(2);
const client = TableClient.fromConnectionString(conn, table, { allowInsecureConnection: true });
await client.createEntity({ partitionKey: "00", rowKey, Message: "{}", Type: type, TraceParent: traceParent });
