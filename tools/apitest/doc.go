// Package apitest holds the tests of the HTTP API (package api) over real
// Azurites: every route driven to success with each request and answer
// validated against api/openapi.json (a JSON Schema 2020-12 validator,
// kept out of the library's dependencies), tokens, roles, type limits,
// platform sign-in, malformed input, body limits, throttling and the
// audit log; and the TypeScript client's types checked against the
// document.
package apitest
