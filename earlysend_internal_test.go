package leasecron

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

func TestEarlyWindowCoversAFailover(t *testing.T) {
	short := trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: time.Second}
	for i, c := range []struct {
		m    schedule.MoverSettings
		l    trafficcop.Timing
		want time.Duration
	}{
		{schedule.MoverSettings{}, trafficcop.Timing{}, 75 * time.Second},
		{schedule.MoverSettings{}, short, 16 * time.Second},
		{schedule.MoverSettings{PollEvery: 30 * time.Second}, short, 30 * time.Second},
		{schedule.MoverSettings{Early: 3 * time.Second}, trafficcop.Timing{}, 3 * time.Second},
		{schedule.MoverSettings{Early: -1}, trafficcop.Timing{}, -1},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if got := earlyWindow(c.m, c.l); got != c.want {
				t.Errorf("earlyWindow(%+v, %+v) = %s, want %s", c.m, c.l, got, c.want)
			}
		})
	}
}
