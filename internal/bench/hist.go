package bench

import (
	"math/bits"
	"time"
)

// hist is a log-linear histogram of latencies in microseconds, like an HDR
// histogram with two significant digits: values below 128 µs are kept
// exactly, larger ones in 64 buckets per power of two, so a percentile is
// off by less than 1 %. It grows only as far as the largest value seen,
// which keeps a histogram per second and outcome cheap.
type hist struct {
	counts []uint64
	n      uint64
	max    int64 // µs
}

const (
	exactBelow = 128 // values under this have a bucket each
	halfExact  = exactBelow / 2
)

func bucketOf(us int64) int {
	if us < exactBelow {
		return int(max(us, 0))
	}
	shift := bits.Len64(uint64(us)) - bits.Len64(exactBelow-1) // keeps the top 7 bits: us>>shift in [64, 128)
	return shift*halfExact + int(us>>shift)
}

// midOf is the middle of bucket i's range.
func midOf(i int) int64 {
	if i < exactBelow {
		return int64(i)
	}
	shift := i/halfExact - 1
	low := int64(i-shift*halfExact) << shift
	return low + (int64(1)<<shift)/2
}

func (h *hist) add(d time.Duration) {
	us := d.Microseconds()
	i := bucketOf(us)
	if i >= len(h.counts) {
		grown := make([]uint64, i+1+halfExact)
		copy(grown, h.counts)
		h.counts = grown
	}
	h.counts[i]++
	h.n++
	if us > h.max {
		h.max = us
	}
}

func (h *hist) merge(o *hist) {
	if len(o.counts) > len(h.counts) {
		grown := make([]uint64, len(o.counts))
		copy(grown, h.counts)
		h.counts = grown
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the latency below which a share q of the values fall.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	if rank == h.n {
		return time.Duration(h.max) * time.Microsecond
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(midOf(i), h.max)) * time.Microsecond
		}
	}
	return time.Duration(h.max) * time.Microsecond
}

// Percentiles summarises a latency distribution, in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (h *hist) percentiles() Percentiles {
	return Percentiles{
		P50: ms(h.quantile(0.50)),
		P90: ms(h.quantile(0.90)),
		P99: ms(h.quantile(0.99)),
		Max: ms(time.Duration(h.max) * time.Microsecond),
	}
}
