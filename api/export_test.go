package api

// Routes returns "METHOD /path" of every route the server serves (the
// document aside).
func Routes() []string {
	var out []string
	for _, r := range (&server{}).table() {
		out = append(out, r.pattern)
	}
	return out
}
