package dashboard

import (
	"html/template"
	"net/url"
	"strings"

	"github.com/leasecron/leasecron/leasecrontype"
)

// pageTemplates are the templates rendered inside the layout.
var pageTemplates = []string{"overview", "tasks", "task", "recurring", "runs", "deadletters", "blackboard", "fleet", "error"}

// parseTemplates parses the layout with each page (html/template escapes
// every value for its context: text, attribute, URL).
func parseTemplates() (map[string]*template.Template, error) {
	funcs := templateFuncs()
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
}

// pagerLinks are the query strings of a paged list's links.
type pagerLinks struct {
	Cursor      string // this page's token ("" = first page)
	First, Next string // query strings without "?"
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
		"pager": func(cursor, next, extra string) pagerLinks {
			p := pagerLinks{Cursor: cursor, First: extra}
			if next != "" {
				p.Next = strings.TrimPrefix(extra+"&continue="+url.QueryEscape(next), "&")
			}
			return p
		},
		"runsQuery": func(state, typ string) string {
			v := url.Values{}
			if state != "" {
				v.Set("state", state)
			}
			if typ != "" {
				v.Set("type", typ)
			}
			return v.Encode()
		},
		"finished": func(state string) bool { return leasecrontype.RunState(state).Finished() },
	}
}
