package dashboard

import (
	"html/template"
	"net/url"
	"strings"

	"github.com/leasecron/leasecron/leasecrontype"
)

// pageTemplates are the templates rendered inside the layout.
var pageTemplates = []string{"overview", "tasks", "task", "recurring", "runs", "deadletters", "blackboard", "fleet", "audit", "search", "latency", "bulk", "bulknew", "bulkop", "batch", "error"}

// parseTemplates parses the layout with each page (html/template escapes
// every value for its context: text, attribute, URL).
// parseTemplates parses every page; base is the path prefix every link
// of the pages starts with (Options.BasePath).
func parseTemplates(base string) (map[string]*template.Template, error) {
	funcs := templateFuncs()
	funcs["base"] = func() string { return base }
	for k, v := range renderFuncs() {
		funcs[k] = v
	}
	out := map[string]*template.Template{}
	for _, name := range pageTemplates {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, nil
}

type navItem struct{ Key, Path, Label string }

var nav = []navItem{
	{"overview", "/", "Overview"},
	{"tasks", "/tasks", "Tasks"},
	{"recurring", "/recurring", "Recurring"},
	{"runs", "/runs", "Runs"},
	{"deadletters", "/deadletters", "Dead letters"},
	{"blackboard", "/blackboard", "Blackboard"},
	{"fleet", "/fleet", "Fleet"},
	{"latency", "/latency", "Latency"},
	{"audit", "/audit", "Audit"},
	{"bulk", "/bulk", "Bulk"},
}

// pagerLinks are the links of a paged list.
type pagerLinks struct {
	Cursor      string       // this page's token ("" = first page)
	First, Next template.URL // "?query"; Next is "" on the last page
}

func renderFuncs() template.FuncMap {
	return template.FuncMap{
		"navItems": func() []navItem { return nav },
		// apiHref is the JSON twin of a page: /api + its path and query
		// (the overview's twin is /api/overview).
		"apiHref": func(here string) string {
			if here == "/" || strings.HasPrefix(here, "/?") {
				return "/api/overview" + strings.TrimPrefix(here, "/")
			}
			return "/api" + here
		},
		// pager builds the first/next links from the page's filters (name,
		// value pairs; empty values left out) and the next token. The
		// query is encoded here, whole, so the template inserts it as is.
		"pager": func(cursor, next string, filters ...string) pagerLinks {
			v := url.Values{}
			for i := 0; i+1 < len(filters); i += 2 {
				if filters[i+1] != "" {
					v.Set(filters[i], filters[i+1])
				}
			}
			p := pagerLinks{Cursor: cursor, First: template.URL("?" + v.Encode())}
			if next != "" {
				v.Set("continue", next)
				p.Next = template.URL("?" + v.Encode())
			}
			return p
		},
		"finished": func(state string) bool { return leasecrontype.RunState(state).Finished() },
	}
}
