// Command report renders the benchmark records written by
// `go run ./bench -out DIR` as Markdown with PNG plots:
//
//	go run ./bench/report -in DIR -out docs
//
// writes docs/BENCHMARKS.md and docs/bench/*.png. Scenarios without a
// record are listed as not run.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leasecron/leasecron/tools/bench/results"
)

func main() {
	in := flag.String("in", "", "directory of the JSON records (required)")
	out := flag.String("out", "", "directory for BENCHMARKS.md and bench/*.png (required)")
	flag.Parse()
	if *in == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "report: -in and -out are required")
		flag.Usage()
		os.Exit(2)
	}
	path, err := Render(*in, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "report: wrote", path)
}

// records are the loaded results; nil fields were not run.
type records struct {
	machine      results.Machine
	mover        *results.Mover
	consumer     *results.Consumer
	lateness     *results.Lateness
	failover     *results.Failover
	transactions *results.Transactions
	idle         *results.Idle
	footprint    *results.Footprint
	history      *results.History
	dashboard    *results.Dashboard
	batch        *results.Batch
	rate         *results.RateLimit
	shards       *results.Shards
	api          *results.API
	capacity     *results.Capacity
	account      *results.Consumer
}

// load reads every record of dir; machine.json is required.
func load(dir string) (records, error) {
	var r records
	if err := results.Read(dir, results.MachineFile, &r.machine); err != nil {
		return r, err
	}
	opt := func(name string, v any) (bool, error) {
		err := results.Read(dir, name, v)
		if errors.Is(err, results.ErrMissing) {
			return false, nil
		}
		return err == nil, err
	}
	var err error
	var ok bool
	var (
		m  results.Mover
		c  results.Consumer
		l  results.Lateness
		f  results.Failover
		t  results.Transactions
		i  results.Idle
		fp results.Footprint
		h  results.History
		db results.Dashboard
		bt results.Batch
		ac results.Consumer
		rl results.RateLimit
		sh results.Shards
		ap results.API
		cp results.Capacity
	)
	for _, x := range []struct {
		name string
		v    any
		set  func()
	}{
		{results.MoverFile, &m, func() { r.mover = &m }},
		{results.ConsumerFile, &c, func() { r.consumer = &c }},
		{results.LatenessFile, &l, func() { r.lateness = &l }},
		{results.FailoverFile, &f, func() { r.failover = &f }},
		{results.TransactionsFile, &t, func() { r.transactions = &t }},
		{results.IdleFile, &i, func() { r.idle = &i }},
		{results.FootprintFile, &fp, func() { r.footprint = &fp }},
		{results.HistoryFile, &h, func() { r.history = &h }},
		{results.DashboardFile, &db, func() { r.dashboard = &db }},
		{results.BatchFile, &bt, func() { r.batch = &bt }},
		{results.AccountFile, &ac, func() { r.account = &ac }},
		{results.RateFile, &rl, func() { r.rate = &rl }},
		{results.ShardsFile, &sh, func() { r.shards = &sh }},
		{results.APIFile, &ap, func() { r.api = &ap }},
		{results.CapacityFile, &cp, func() { r.capacity = &cp }},
	} {
		if ok, err = opt(x.name, x.v); err != nil {
			return r, err
		}
		if ok {
			x.set()
		}
	}
	return r, nil
}

// Render reads the records in in and writes out/BENCHMARKS.md and
// out/bench/*.png, returning the Markdown file's path.
func Render(in, out string) (string, error) {
	r, err := load(in)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(out, "bench"), 0o755); err != nil {
		return "", err
	}
	md, err := render(r, out)
	if err != nil {
		return "", err
	}
	path := filepath.Join(out, "BENCHMARKS.md")
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		return "", err
	}
	return path, nil
}
