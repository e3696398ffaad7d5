// Command preparebench measures what a DRA driver's prepare and unprepare
// cost the kubelet, end to end against a real kube-apiserver, side by side
// with the upstream DRA test driver (k8s.io/kubernetes/test/e2e/dra/
// test-driver) and dra-example-driver's kubelet plugin. One command runs it:
//
//	make bench-e2e
//
// which builds (and caches) the cluster binaries and the two other drivers
// and runs
//
//	go run ./test/e2e/preparebench --bin "$(hack/e2e/build-cluster-binaries.sh)" \
//	    --drivers "$(hack/e2e/build-bench-drivers.sh)" $(BENCH_E2E_FLAGS)
//
// It starts etcd and kube-apiserver (localcluster), a Node object, and the
// three drivers as host processes with the same raised client QPS; ours
// runs on a simulated node of DFL cards with its defaults (device metadata
// on). Then it acts as the kubelet: it registers nothing, dials each
// driver's dra.sock and calls NodePrepareResources and
// NodeUnprepareResources (kubelet DRA gRPC v1) for claims it created and
// allocated in the API server, so every prepare includes the claim read
// the kubeletplugin library makes. At concurrency c, c workers each prepare
// and unprepare claims on a device of their own, one after another; between
// the two calls (untimed) it waits until our driver reported the device in
// the claim's status, as it does long before a pod ends, so that every
// prepare's status write is part of the load and the unprepare does not
// overlap it. Rounds
// alternate the drivers so that they share the machine's noise; the figures
// are the client's latencies of every call of every round: p50 and p99 per
// driver, call and concurrency, and the ratio of ours to the test driver's.
//
// --before DIR also measures the driver of another checkout (a git
// worktree of an earlier commit) in the same run, as "before".
//
// --cpuprofile FILE then profiles our daemon (built with the pprof tag)
// while it alone prepares for --profile-seconds.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fpga-dra/fpga-dra-driver/test/e2e/localcluster"
)

type options struct {
	bin, drivers, repo, dir string
	before                  string
	only                    string
	claims, rounds          int
	concurrency             []int
	qps                     int
	cpuProfile              string
	profileSeconds          int
}

func main() {
	var o options
	var conc string
	flag.StringVar(&o.bin, "bin", "", "directory of the cluster binaries (hack/e2e/build-cluster-binaries.sh prints it)")
	flag.StringVar(&o.drivers, "drivers", "", "directory of dra-test-driver and dra-example-kubeletplugin (hack/e2e/build-bench-drivers.sh prints it); empty measures ours only")
	flag.StringVar(&o.repo, "repo", ".", "repository root (to build our driver)")
	flag.StringVar(&o.before, "before", "", "another checkout of this repository (e.g. a git worktree of an earlier commit) whose driver is measured beside ours as \"before\"")
	flag.StringVar(&o.dir, "dir", "", "run directory (logs); a new one below the temporary directory, removed after a passing run, when empty")
	flag.StringVar(&o.only, "only", "", "comma-separated drivers to measure (fpga, before, test, example); all found when empty")
	flag.IntVar(&o.claims, "claims", 96, "claims per driver, concurrency and round")
	flag.IntVar(&o.rounds, "rounds", 5, "rounds; each measures every driver at every concurrency")
	flag.StringVar(&conc, "concurrency", "1,8", "comma-separated concurrencies")
	flag.IntVar(&o.qps, "qps", 1000, "client QPS of every driver (burst twice that)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of our daemon, taken after the figures while it alone prepares, to this file")
	flag.IntVar(&o.profileSeconds, "profile-seconds", 20, "how long the --cpuprofile profile runs")
	flag.Parse()
	var err error
	if o.concurrency, err = parseInts(conc); err != nil {
		fatalf("--concurrency %q: %v: give counts such as 1,8", conc, err)
	}
	if o.bin == "" {
		fatalf("--bin is required: the directory hack/e2e/build-cluster-binaries.sh prints")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		stop()
		fatalf("%v", err)
	}
}

func run(ctx context.Context, o options) (err error) {
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	c, err := localcluster.Up(ctx, localcluster.Config{BinDir: o.bin, Repo: o.repo, Dir: o.dir, NodeName: "bench-node", APIServerOnly: true, Logf: logf})
	if err != nil {
		return err
	}
	defer func() {
		c.Down()
		if err == nil {
			err = c.RemoveRunDir()
		} else {
			logf("logs kept in %s", c.LogDir)
		}
	}()
	// The bench's own calls (creating claims) are not to queue either.
	if c.Client, err = adminClient(c, o.qps); err != nil {
		return err
	}
	if err := createNode(ctx, c); err != nil {
		return err
	}
	drivers, err := startDrivers(ctx, c, o, logf)
	if err != nil {
		return err
	}
	res := newResults()
	for round := 0; round <= o.rounds; round++ {
		for _, d := range drivers {
			for _, n := range o.concurrency {
				claims := o.claims
				if round == 0 {
					claims = 2 * n // warm-up, not counted
				}
				s, err := measure(ctx, c, d, fmt.Sprintf("r%d-c%d", round, n), n, claims)
				if err != nil {
					return fmt.Errorf("%s at concurrency %d: %w", d.name, n, err)
				}
				if round > 0 {
					res.add(d.name, n, s)
				}
			}
		}
		if round > 0 {
			logf("round %d of %d done", round, o.rounds)
		}
	}
	res.print(os.Stdout, drivers, o.concurrency)
	if o.cpuProfile != "" {
		i := slices.IndexFunc(drivers, func(d *driver) bool { return d.pprof != "" })
		if i < 0 {
			return fmt.Errorf("--cpuprofile profiles our driver: measure it (--only)")
		}
		return profile(ctx, c, drivers[i], o, logf)
	}
	return nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "preparebench: "+format+"\n", args...)
	os.Exit(1)
}
