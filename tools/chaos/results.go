package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/internal/storage"
)

// Fault is one injected fault and how the fleet recovered from it.
type Fault struct {
	// Kind names the fault ("SIGKILL leader w2", "Azurite restart", ...).
	Kind string `json:"kind"`
	// At is the offset of the fault from the scenario's start.
	At Duration `json:"at"`
	// Takeover is the time from the fault until a new term of control
	// began (0 when not applicable or when none was needed).
	Takeover Duration `json:"takeover,omitempty"`
	// Recovery is the time from the fault until the scenario's recovery
	// event (see Result.RecoveryRule).
	Recovery Duration `json:"recovery"`
	// Detail says what was observed.
	Detail string `json:"detail,omitempty"`
}

// Result is one scenario run: a row of the results table.
type Result struct {
	// Scenario is the row's key, e.g. "1 leader SIGKILL under backlog".
	Scenario string `json:"scenario"`
	// Test is the Go test that produced it.
	Test string `json:"test"`
	// Short marks the short versions that run in `make test`.
	Short bool `json:"short,omitempty"`
	// When the run finished.
	When time.Time `json:"when"`
	// Workers is how many worker processes took part (replacements
	// included).
	Workers int `json:"workers"`
	// Tasks scheduled and acknowledged; Executed ran at least once.
	Tasks    int `json:"tasks"`
	Executed int `json:"executed"`
	// Lost counts acknowledged tasks that never ran (must be 0).
	Lost int `json:"lost"`
	// EmulatorDropped counts acknowledged tasks that never ran and of which
	// Azurite kept no trace after a SIGKILL of Azurite itself, within its
	// unsaved window: writes the emulator acknowledged and then lost, which
	// no client can recover. Reported apart from Lost, never hidden.
	EmulatorDropped int `json:"emulator_dropped,omitempty"`
	// Duplicates counts executions beyond the first.
	Duplicates      int `json:"duplicates"`
	DuplicatedTasks int `json:"duplicated_tasks"`
	// MaxMovers is the largest number of terms of control in force at one
	// instant; Overlap is their summed overlap and OverlapNote explains it.
	MaxMovers   int      `json:"max_movers"`
	Overlap     Duration `json:"overlap,omitempty"`
	OverlapNote string   `json:"overlap_note,omitempty"`
	// Terms is how many terms of control the logs show.
	Terms int `json:"terms"`
	// Faults and the rule that defines their recovery time.
	Faults       []Fault `json:"faults"`
	RecoveryRule string  `json:"recovery_rule"`
	// Elapsed is the scenario's wall time.
	Elapsed Duration `json:"elapsed"`
	// Passed is true when every check of the scenario held.
	Passed bool `json:"passed"`
	// Notes are other measurements and observations.
	Notes []string `json:"notes,omitempty"`
}

// MaxRecovery returns the longest recovery among the faults.
func (r Result) MaxRecovery() time.Duration {
	var m time.Duration
	for _, f := range r.Faults {
		m = max(m, time.Duration(f.Recovery))
	}
	return m
}

// BadInput is one row of the bad-input table.
type BadInput struct {
	Input    string `json:"input"`
	Expected string `json:"expected"`
	Observed string `json:"observed"`
	OK       bool   `json:"ok"`
}

// Report is the results file: the latest result of each scenario.
type Report struct {
	Updated   time.Time  `json:"updated"`
	Results   []Result   `json:"results"`
	BadInputs []BadInput `json:"bad_inputs,omitempty"`
	// Machine describes where the results were measured.
	Machine string `json:"machine,omitempty"`
}

// Duration is a time.Duration that reads and writes as a string ("1.5s").
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// String rounds for reports.
func (d Duration) String() string { return round(time.Duration(d)).String() }

func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	default:
		return d.Round(time.Millisecond)
	}
}

// LoadReport reads a results file; a missing file is an empty report.
func LoadReport(path string) (Report, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Report{}, nil
	}
	if err != nil {
		return Report{}, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return Report{}, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// Merge replaces the results of the scenarios in rs (and the bad-input
// table when bad is non-empty), keeping the rest, sorted by scenario.
func (r *Report) Merge(rs []Result, bad []BadInput) {
	for _, n := range rs {
		replaced := false
		for i := range r.Results {
			if r.Results[i].Scenario == n.Scenario {
				r.Results[i], replaced = n, true
			}
		}
		if !replaced {
			r.Results = append(r.Results, n)
		}
	}
	sort.SliceStable(r.Results, func(i, j int) bool { return scenarioLess(r.Results[i].Scenario, r.Results[j].Scenario) })
	if len(bad) > 0 {
		r.BadInputs = bad
	}
	if len(rs) > 0 || len(bad) > 0 {
		r.Updated = time.Now().UTC().Round(time.Second)
	}
}

// Save writes the report as indented JSON.
func (r Report) Save(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ResultsTable is the Azure table each scenario writes its row to.
const ResultsTable = "ChaosResults"

// WriteTable writes r as a row of ResultsTable (PartitionKey "chaos",
// RowKey the scenario with characters forbidden in keys replaced).
func WriteTable(ctx context.Context, sc *storage.Clients, r Result) error {
	if err := sc.EnsureTable(ctx, ResultsTable); err != nil {
		return err
	}
	key := strings.Map(func(c rune) rune {
		if strings.ContainsRune(`/\#?`, c) || c < 0x20 || c == 0x7f {
			return '_'
		}
		return c
	}, r.Scenario)
	faults, _ := json.Marshal(r.Faults)
	row := map[string]any{
		"PartitionKey": "chaos", "RowKey": key, "Test": r.Test, "Tasks": r.Tasks, "Executed": r.Executed,
		"Lost": r.Lost, "EmulatorDropped": r.EmulatorDropped, "Duplicates": r.Duplicates, "MaxMovers": r.MaxMovers,
		"MaxRecoveryMs": r.MaxRecovery().Milliseconds(), "ElapsedMs": time.Duration(r.Elapsed).Milliseconds(),
		"Passed": r.Passed, "Faults": string(faults),
	}
	b, err := json.Marshal(row)
	if err != nil {
		return err
	}
	_, err = sc.Table.NewClient(ResultsTable).UpsertEntity(ctx, b, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
	return storage.Translate(err)
}

// scenarioLess orders scenario names by their leading number ("2 …"
// before "10 …"), then as text ("4a" before "4b").
func scenarioLess(a, b string) bool {
	na, ra := leadingNumber(a)
	nb, rb := leadingNumber(b)
	if na != nb {
		return na < nb
	}
	return ra < rb
}

// leadingNumber splits s into the number its digits start with (0 when
// none) and the rest.
func leadingNumber(s string) (int, string) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, _ := strconv.Atoi(s[:i])
	return n, s[i:]
}
