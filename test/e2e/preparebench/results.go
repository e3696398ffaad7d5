package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"
)

// results are the latencies of every counted call, by driver and
// concurrency.
type results map[string]map[int]*samples

func newResults() results { return results{} }

func (r results) add(driver string, concurrency int, s samples) {
	if r[driver] == nil {
		r[driver] = map[int]*samples{}
	}
	if r[driver][concurrency] == nil {
		r[driver][concurrency] = &samples{}
	}
	all := r[driver][concurrency]
	all.prepare = append(all.prepare, s.prepare...)
	all.unprepare = append(all.unprepare, s.unprepare...)
}

// quantile is the q-quantile of d (nearest rank); d is sorted in place.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[int(q*float64(len(d)-1)+0.5)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

// print writes the table: per concurrency and driver the p50 and p99 of
// prepare and unprepare in milliseconds, with ours relative to the test
// driver's.
func (r results) print(w io.Writer, drivers []*driver, concurrency []int) {
	fmt.Fprintf(w, "\nkubelet-side latency (ms) over %d CPUs; x/test = p50 ratio to the test driver\n", runtime.NumCPU())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "concurrency\tdriver\tcalls\tprepare p50\tprepare p99\tunprepare p50\tunprepare p99\t")
	for _, n := range concurrency {
		for _, d := range drivers {
			s := r[d.name][n]
			if s == nil {
				continue
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t\n", n, d.name, len(s.prepare),
				ms(quantile(s.prepare, 0.5)), ms(quantile(s.prepare, 0.99)),
				ms(quantile(s.unprepare, 0.5)), ms(quantile(s.unprepare, 0.99)))
		}
		test := r["test"][n]
		for _, name := range []string{"before", "fpga"} {
			ours := r[name][n]
			if ours == nil || test == nil {
				continue
			}
			ratio := func(a, b []time.Duration) string {
				return fmt.Sprintf("%.2fx", float64(quantile(a, 0.5))/float64(quantile(b, 0.5)))
			}
			fmt.Fprintf(tw, "%d\t%s/test\t\t%s\t\t%s\t\t\n", n, name, ratio(ours.prepare, test.prepare), ratio(ours.unprepare, test.unprepare))
		}
	}
	tw.Flush()
}
