package results

// DashboardFile is the dashboard scenario's record.
const DashboardFile = "dashboard.json"

// Dashboard is scenario 7: the web dashboard's server time and storage
// requests per page over a large account.
type Dashboard struct {
	// Pending, Series, Runs, DeadLetters and Keys are what the account
	// held.
	Pending     int `json:"pending"`
	Series      int `json:"series"`
	Runs        int `json:"runs"`
	DeadLetters int `json:"dead_letters"`
	Keys        int `json:"keys"`
	// Reps is how many times each page was rendered (each time with an
	// empty cache).
	Reps int `json:"reps"`
	// BaselineMS is the median time of the plain-SDK read a page needs at
	// the least: one table query of 50 entities.
	BaselineMS float64 `json:"baseline_ms"`
	// Pages are the measurements, one row per page.
	Pages []DashboardPage `json:"pages"`
	// RecentPerSeries and SeriesReadsAtOnce are how /recurring reads each
	// series' latest occurrences: that many, with one range query per
	// series, that many queries at a time.
	RecentPerSeries   int `json:"recent_per_series"`
	SeriesReadsAtOnce int `json:"series_reads_at_once"`
	// CachedMS is the median time of a page served from the shared cache
	// (the overview, a second viewer within the TTL), with no request.
	CachedMS float64 `json:"cached_ms"`
}

// DashboardPage is one page's measurement.
type DashboardPage struct {
	Path string `json:"path"`
	// Label names a page whose URL carries a long token ("/tasks, page
	// 100"); empty means the path says it.
	Label string `json:"label,omitempty"`
	// Requests is the storage requests one render made (the same every
	// repetition: the last is kept) and ByOp their breakdown.
	Requests int64            `json:"requests"`
	ByOp     map[string]int64 `json:"by_op"`
	// MS are the server times of the renders, in milliseconds.
	MS Summary `json:"ms"`
	// Bytes is the size of the HTML.
	Bytes int `json:"bytes"`
}
