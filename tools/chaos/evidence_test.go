package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasecron/leasecron/tools/internal/fleet"
	"github.com/leasecron/leasecron/trafficcop"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestParseWorkerLog(t *testing.T) {
	log := `{"time":"2026-11-22T10:00:00.100Z","level":"INFO","msg":"worker starting"}
{"time":"2026-11-22T10:00:00.200Z","level":"INFO","msg":"acquired control","generation":3}
{"time":"2026-11-22T10:00:00.250Z","level":"INFO","msg":"in control","component":"mover","generation":3}
{"time":"2026-11-22T10:00:00.300Z","level":"INFO","msg":"stopping","component":"something else"}
not json at all
{"time":"2026-11-22T10:00:05.000Z","level":"WARN","msg":"leasecron mover: stopping","generation":3,"err":"fenced"}
{"time":"2026-11-22T10:00:05.100Z","level":"WARN","msg":"lost control","generation":3,"reason":"lease lost"}
{"time":"2026-11-22T10:00:06.000Z","level":"INFO","msg":"acquired con`
	path := filepath.Join(t.TempDir(), "w1.log")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	es, err := ParseWorkerLog(path, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 4 {
		t.Fatalf("got %d events, want 4: %+v", len(es), es)
	}
	if es[0].Msg != MsgAcquired || es[0].Generation != 3 || !es[0].Time.Equal(at(200)) || es[0].Worker != "w1" {
		t.Errorf("first event %+v", es[0])
	}
	if es[2].Reason != "fenced" || es[3].Reason != "lease lost" {
		t.Errorf("reasons %q %q", es[2].Reason, es[3].Reason)
	}
	terms := Terms(es, nil, at(10000))
	if len(terms) != 1 || terms[0].EndReason != "lost" || !terms[0].Fenced || !terms[0].MoverStart.Equal(at(250)) || !terms[0].End.Equal(at(5100)) {
		t.Errorf("terms %+v", terms)
	}
	if _, err := ParseWorkerLog(filepath.Join(t.TempDir(), "missing.log"), "w9"); err == nil {
		t.Error("a missing log parsed")
	}
}

func TestTermsEndings(t *testing.T) {
	es := []LogEvent{
		{Time: at(0), Worker: "w1", Msg: MsgAcquired, Generation: 1},
		{Time: at(900), Worker: "w1", Msg: MsgGaveUp, Generation: 1},
		{Time: at(1000), Worker: "w2", Msg: MsgAcquired, Generation: 2},
		{Time: at(3000), Worker: "w3", Msg: MsgAcquired, Generation: 3},
		{Time: at(5000), Worker: "w1", Msg: MsgAcquired, Generation: 4},
		// An end line of another generation does not end the term.
		{Time: at(5100), Worker: "w1", Msg: MsgLost, Generation: 1},
	}
	deaths := map[string]time.Time{"w2": at(2000)}
	terms := Terms(es, deaths, at(9000))
	want := []struct {
		w      string
		g      int64
		end    int
		reason string
	}{{"w1", 1, 900, "gave up"}, {"w2", 2, 2000, "killed"}, {"w3", 3, 9000, "open"}, {"w1", 4, 9000, "open"}}
	if len(terms) != len(want) {
		t.Fatalf("terms %v", terms)
	}
	for i, w := range want {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			x := terms[i]
			if x.Worker != w.w || x.Generation != w.g || !x.End.Equal(at(w.end)) || x.EndReason != w.reason {
				t.Errorf("term %d = %s, want %+v", i, x, w)
			}
		})
	}
	if !terms[2].Open || terms[0].Open {
		t.Error("Open flags wrong")
	}
	n, ov := MaxOverlap(terms)
	if n != 2 || len(ov) != 1 || ov[0].Duration != 4*time.Second {
		t.Errorf("MaxOverlap = %d, %+v; want 2 and w3/w1 overlapping 4s", n, ov)
	}
	if got, ok := TermOf(terms, "w2", 2); !ok || got.EndReason != "killed" {
		t.Errorf("TermOf = %v %v", got, ok)
	}
	if got, ok := FirstTermAfter(terms, at(500), "w2"); !ok || got.Worker != "w3" {
		t.Errorf("FirstTermAfter = %v %v", got, ok)
	}
	if !strings.Contains(terms[1].String(), "w2 gen 2") {
		t.Errorf("String() = %q", terms[1].String())
	}
}

func TestMaxOverlapTouchingCounts(t *testing.T) {
	terms := []Term{
		{Worker: "a", Generation: 1, Start: at(0), End: at(1000)},
		{Worker: "b", Generation: 2, Start: at(1000), End: at(2000)},
		{Worker: "c", Generation: 3, Start: at(2001), End: at(3000)},
	}
	n, ov := MaxOverlap(terms)
	if n != 2 || len(ov) != 1 || ov[0].A.Worker != "a" || ov[0].B.Worker != "b" || ov[0].Duration != 0 {
		t.Errorf("touching terms: %d %+v", n, ov)
	}
	if n, ov := MaxOverlap(terms[1:]); n != 1 || len(ov) != 0 {
		t.Errorf("disjoint terms: %d %+v", n, ov)
	}
	if n, _ := MaxOverlap(nil); n != 0 {
		t.Errorf("no terms: %d", n)
	}
}

func TestSummarise(t *testing.T) {
	terms := []Term{{Worker: "w1", Generation: 1, Start: at(0), End: at(5000)}, {Worker: "w2", Generation: 2, Start: at(6000), End: at(9000)}}
	recs := []fleet.Record{
		{ID: "a", At: at(100), Worker: "w1", Generation: 1, Phase: "start"},
		{ID: "a", At: at(6500), Worker: "w2", Generation: 2, Phase: "start"},
		{ID: "a", At: at(6600), Worker: "w2", Generation: 2, Phase: "end"},
		{ID: "b", At: at(5500), Worker: "w2", Generation: 2, Phase: "start"}, // before its term
		{ID: "c", At: at(7000), Worker: "w3", Generation: 7, Phase: "start"}, // unknown generation
		{ID: "zz", At: at(7000), Worker: "w3", Generation: 2, Phase: "start"},
		{ID: "now", At: at(50), Worker: "w1", Generation: 0, Phase: "start"}, // sent by its client
	}
	x := Summarise([]string{"a", "b", "c", "d", "now"}, recs, terms)
	if x.Tasks != 5 || x.Executed != 4 || len(x.Missing) != 1 || x.Missing[0] != "d" || x.ClientSent != 1 {
		t.Errorf("counts %+v", x)
	}
	if x.Duplicates != 1 || x.DuplicatedTasks != 1 || x.Unexpected != 1 || x.BeforeTerm != 1 {
		t.Errorf("dups %d/%d unexpected %d before %d", x.Duplicates, x.DuplicatedTasks, x.Unexpected, x.BeforeTerm)
	}
	if len(x.UnknownGeneration) != 1 || x.UnknownGeneration[0] != 7 {
		t.Errorf("unknown generations %v", x.UnknownGeneration)
	}
	if f := x.First["a"]; !f.At.Equal(at(100)) {
		t.Errorf("first of a at %v", f.At)
	}
	if r, ok := FirstStartAfter(recs, at(6000), func(r fleet.Record) bool { return r.Generation >= 2 }); !ok || r.ID != "a" {
		t.Errorf("FirstStartAfter = %+v %v", r, ok)
	}
	if _, ok := FirstStartAfter(recs, at(8000), nil); ok {
		t.Error("FirstStartAfter found a record after the last one")
	}
}

func TestLeasePollerAndHistory(t *testing.T) {
	var n atomic.Int64
	read := func(context.Context) (trafficcop.HolderInfo, error) {
		switch k := n.Add(1); {
		case k == 3:
			return trafficcop.HolderInfo{}, errors.New("storage down")
		case k < 5:
			return trafficcop.HolderInfo{Holder: "w1", Generation: 1, State: trafficcop.LeaseLeased}, nil
		default:
			return trafficcop.HolderInfo{Holder: "w2", Generation: 2, State: trafficcop.LeaseLeased}, nil
		}
	}
	start := time.Now()
	p := StartLeasePoller(read, 5*time.Millisecond)
	for len(p.History()) < 8 {
		time.Sleep(5 * time.Millisecond)
	}
	p.Stop()
	p.Stop()
	h := p.History()
	if h[2].Err == "" {
		t.Errorf("sample 3 should carry the error: %+v", h[2])
	}
	gens, back := GenerationsSeen(h)
	if len(gens) != 2 || gens[0] != 1 || gens[1] != 2 || back {
		t.Errorf("generations %v backwards %v", gens, back)
	}
	if s, ok := FirstHeldAfter(h, start, 1); !ok || s.Holder != "w2" {
		t.Errorf("FirstHeldAfter = %+v %v", s, ok)
	}
	if _, back := GenerationsSeen([]LeaseSample{{Generation: 3}, {Generation: 2}}); !back {
		t.Error("a generation going backwards was not noticed")
	}
}

func TestReportMergeSaveLoadRender(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results", "chaos.json")
	rep, err := LoadReport(path)
	if err != nil || len(rep.Results) != 0 {
		t.Fatalf("missing file: %+v %v", rep, err)
	}
	a := Result{Scenario: "2 b", Tasks: 10, Passed: true, Faults: []Fault{{Kind: "k|ill", Recovery: Duration(1500 * time.Millisecond), Takeover: Duration(time.Second)}}}
	b := Result{Scenario: "1 a", Tasks: 5, Lost: 1}
	rep.Merge([]Result{a, b}, []BadInput{{Input: "x", Expected: "y", Observed: "z", OK: true}})
	a.Tasks = 20
	rep.Merge([]Result{a}, nil)
	if len(rep.Results) != 2 || rep.Results[0].Scenario != "1 a" || rep.Results[1].Tasks != 20 || len(rep.BadInputs) != 1 {
		t.Fatalf("merged %+v", rep)
	}
	if err := rep.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := LoadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Results[1].Faults[0].Recovery; got != Duration(1500*time.Millisecond) {
		t.Errorf("recovery after a round trip: %v", got)
	}
	if back.Results[1].MaxRecovery() != 1500*time.Millisecond {
		t.Errorf("MaxRecovery %v", back.Results[1].MaxRecovery())
	}
	md := RenderMarkdown(back)
	for _, want := range []string{"# Reliability", "| 1 a | 5 | 1 |", "**no**", "k\\|ill", "## Bad input", "| x | y | z | yes |", "Movers at once"} {
		t.Run(want, func(t *testing.T) {
			if !strings.Contains(md, want) {
				t.Errorf("markdown lacks %q", want)
			}
		})
	}
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadReport(path); err == nil {
		t.Error("a corrupt results file loaded")
	}
	var d Duration
	if err := d.UnmarshalJSON([]byte(`"soon"`)); err == nil {
		t.Error("a bad duration parsed")
	}
}

// TestShardTerms: shard terms run from "moving shard" to the shard's own
// end, the worker's "stopped moving shards", its death or the end of the
// run; movers at once are counted per shard, so two shards moved at once
// by two workers are not an overlap, one shard moved by two is.
func TestShardTerms(t *testing.T) {
	es := []LogEvent{
		{Time: at(0), Worker: "a", Msg: MsgShardStart, Shard: "00", Epoch: 1 << 20},
		{Time: at(0), Worker: "a", Msg: MsgShardStart, Shard: "01", Epoch: 1 << 20},
		{Time: at(100), Worker: "b", Msg: MsgShardStart, Shard: "02", Epoch: 1 << 20},
		{Time: at(500), Worker: "a", Msg: MsgShardTaken, Shard: "01", Epoch: 1 << 20},
		{Time: at(700), Worker: "b", Msg: MsgShardStart, Shard: "01", Epoch: 1<<20 + 1},
		{Time: at(900), Worker: "b", Msg: MsgShardStopped, Shard: "01", Epoch: 1<<20 + 1},
		{Time: at(1000), Worker: "b", Msg: MsgShardsStopped},
		{Time: at(1200), Worker: "c", Msg: MsgShardStart, Shard: "00", Epoch: 2 << 20},
	}
	terms := ShardTerms(es, map[string]time.Time{"a": at(1100)}, at(5000))
	got := map[string]string{}
	for _, x := range terms {
		got[x.Worker+"/"+x.Shard+"/"+fmt.Sprint(x.Generation)] = fmt.Sprintf("%d-%d %s", x.Start.Sub(t0).Milliseconds(), x.End.Sub(t0).Milliseconds(), x.EndReason)
	}
	want := map[string]string{
		"a/00/1048576": "0-1100 killed",
		"a/01/1048576": "0-500 gave up",
		"b/02/1048576": "100-1000 gave up",
		"b/01/1048577": "700-900 gave up",
		"c/00/2097152": "1200-5000 open",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("terms\n got %v\nwant %v", got, want)
	}
	if n, ov := MaxShardOverlap(terms); n != 1 || len(ov) != 0 {
		t.Fatalf("movers at once per shard: %d %v", n, ov)
	}
	// b taking shard 00 while a still moves it is an overlap.
	terms = append(terms, Term{Worker: "b", Shard: "00", Generation: 3 << 20, Start: at(1000), End: at(1050)})
	if n, ov := MaxShardOverlap(terms); n != 2 || len(ov) != 1 {
		t.Fatalf("one shard, two movers: %d %v", n, ov)
	}
}

// TestResultsInScenarioOrder: the results are ordered by the scenario's
// number, so that scenario 10 follows 9, not 1.
func TestResultsInScenarioOrder(t *testing.T) {
	var rep Report
	var rs []Result
	for _, s := range []string{"10 resharding", "2 worker", "4b stall", "1 leader", "4a latency", "9 SIGSTOP"} {
		rs = append(rs, Result{Scenario: s})
	}
	rep.Merge(rs, nil)
	var got []string
	for _, r := range rep.Results {
		got = append(got, r.Scenario)
	}
	if want := "1 leader,2 worker,4a latency,4b stall,9 SIGSTOP,10 resharding"; strings.Join(got, ",") != want {
		t.Fatalf("order %v, want %s", got, want)
	}
}
