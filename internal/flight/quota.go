package flight

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/jackc/pgx/v5"

	"berth.dev/berth/internal/fault"
)

// A fare class's quota (capacity + overbooking limit) is split over one or
// more bucket rows, each with its own share and counters and a CHECK that
// sold + held stays within the share. The shares always add up exactly to
// the class quota (a deferred constraint trigger checks it at commit), so
// splitting never sells more, and moving share between buckets never sells
// less: a hold that fits the class but not one bucket moves share to it.

// bucket is one bucket row, as locked by a transaction.
type bucket struct {
	n                 int16
	quota, sold, held int
}

func (b bucket) room() int { return b.quota - b.sold - b.held }

// chooseBucket picks the bucket a single hold tries first: a random one,
// which spreads concurrent holds over the rows.
func chooseBucket(buckets int) int16 {
	if buckets <= 1 {
		return 0
	}
	return int16(rand.IntN(buckets))
}

// takeQuota reserves n units of class in bucket b for a single hold. It is
// the last statement before commit, so the hot row stays locked only until
// then. When bucket b is too full it falls back to locking every bucket of
// the class (in bucket order) and moving share into b.
// Returns fault.SoldOut when the class has fewer than n units left.
func takeQuota(ctx context.Context, tx pgx.Tx, flightID int64, class string, b int16, n int) error {
	tag, err := tx.Exec(ctx, takeQuotaSQL, flightID, class, b, n)
	if err != nil {
		return fmt.Errorf("reserve quota on flight %d: %w", flightID, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	return moveQuota(ctx, tx, flightID, class, b, n)
}

// takeQuotaSQL adds $4 held units to bucket $3 of class $2 of flight $1 if
// they fit it; no row changed means they do not.
const takeQuotaSQL = `UPDATE fare_bucket SET held = held + $4
	WHERE flight_id = $1 AND fare_class = $2 AND bucket = $3 AND sold + held + $4 <= quota`

// moveQuota reserves n units of class in bucket b when takeQuotaSQL found
// that bucket too full: it locks every bucket of the class in bucket order
// and moves share into b, or returns fault.SoldOut.
func moveQuota(ctx context.Context, tx pgx.Tx, flightID int64, class string, b int16, n int) error {
	buckets, err := lockBuckets(ctx, tx, flightID, class)
	if err != nil {
		return err
	}
	if !allocate(buckets, b, n) {
		return soldOut(flightID, class, n)
	}
	return writeBuckets(ctx, tx, flightID, map[string][]bucket{class: buckets})
}

// soldOut is the error of a hold of n units that class of flightID lacks.
func soldOut(flightID int64, class string, n int) error {
	return fault.New(fault.SoldOut, "fare class %s of flight %d has no %d units left", class, flightID, n)
}

// lockBucketsSQL locks every bucket of the classes $2 of flight $1, in
// class and bucket order (scanBuckets reads its rows).
const lockBucketsSQL = `SELECT fare_class, bucket, quota, sold, held FROM fare_bucket
	WHERE flight_id = $1 AND fare_class = ANY($2) ORDER BY fare_class, bucket FOR UPDATE`

// readBucketsSQL reads what lockBucketsSQL does, without locking.
const readBucketsSQL = `SELECT fare_class, bucket, quota, sold, held FROM fare_bucket
	WHERE flight_id = $1 AND fare_class = ANY($2) ORDER BY fare_class, bucket`

// lockBuckets locks every bucket of class in bucket order and returns them.
func lockBuckets(ctx context.Context, tx pgx.Tx, flightID int64, class string) ([]bucket, error) {
	rows, err := tx.Query(ctx, lockBucketsSQL, flightID, []string{class})
	byClass, err := scanBuckets(flightID, rows, err)
	return byClass[class], err
}

// scanBuckets reads the rows of lockBucketsSQL, by class.
func scanBuckets(flightID int64, rows pgx.Rows, err error) (map[string][]bucket, error) {
	if err != nil {
		return nil, fmt.Errorf("lock quota on flight %d: %w", flightID, err)
	}
	out := map[string][]bucket{}
	var (
		class string
		b     bucket
	)
	_, err = pgx.ForEachRow(rows, []any{&class, &b.n, &b.quota, &b.sold, &b.held}, func() error {
		out[class] = append(out[class], b)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("lock quota on flight %d: %w", flightID, err)
	}
	return out, nil
}

// allocate takes n units into bucket target, moving share from the other
// buckets when target lacks room, and reports false (changing nothing)
// when all buckets together lack room. bs is in bucket order.
func allocate(bs []bucket, target int16, n int) bool {
	var t *bucket
	for i := range bs {
		if bs[i].n == target {
			t = &bs[i]
		}
	}
	if t == nil || classRoom(bs) < n {
		return false
	}
	for i := range bs {
		need := n - t.room()
		if need <= 0 {
			break
		}
		if o := &bs[i]; o != t && o.room() > 0 {
			move := min(need, o.room())
			o.quota -= move
			t.quota += move
		}
	}
	t.held += n
	return true
}

// bucketRoom is the room of bucket n of bs.
func bucketRoom(bs []bucket, n int16) int {
	for _, b := range bs {
		if b.n == n {
			return b.room()
		}
	}
	return 0
}

// classRoom is the room of all of bs together.
func classRoom(bs []bucket) int {
	total := 0
	for _, b := range bs {
		total += b.room()
	}
	return total
}

// roomiest returns the bucket with the most room.
func roomiest(bs []bucket) int16 {
	best := 0
	for i := range bs {
		if bs[i].room() > bs[best].room() {
			best = i
		}
	}
	return bs[best].n
}

// writeBuckets stores locked buckets' new shares and held counts in one
// statement; the CHECKs and the deferred share-sum trigger verify them.
func writeBuckets(ctx context.Context, tx pgx.Tx, flightID int64, byClass map[string][]bucket) error {
	sql, args := bucketsUpdate(flightID, byClass)
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("update quota on flight %d: %w", flightID, err)
	}
	return nil
}

// bucketsUpdate is the statement of writeBuckets.
func bucketsUpdate(flightID int64, byClass map[string][]bucket) (string, []any) {
	var (
		classes []string
		ns      []int16
		quotas  []int
		helds   []int
	)
	for c, bs := range byClass {
		for _, b := range bs {
			classes, ns, quotas, helds = append(classes, c), append(ns, b.n), append(quotas, b.quota), append(helds, b.held)
		}
	}
	return `UPDATE fare_bucket fb SET quota = u.quota, held = u.held
		FROM unnest($2::text[], $3::smallint[], $4::int[], $5::int[]) AS u(fare_class, bucket, quota, held)
		WHERE fb.flight_id = $1 AND fb.fare_class = u.fare_class AND fb.bucket = u.bucket`,
		[]any{flightID, classes, ns, quotas, helds}
}

// splitQuota divides a class quota over n buckets as evenly as possible.
func splitQuota(quota, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = quota / n
		if i < quota%n {
			out[i]++
		}
	}
	return out
}

// quotaDelta is what a batch adds to one bucket's held count.
type quotaDelta struct {
	class string
	n     int16
	held  int
}

// sumDeltas adds up the units of planned holds per class and bucket, in
// class and bucket order (the order every transaction locks them in).
func sumDeltas(plan []planned) []quotaDelta {
	var out []quotaDelta
	for _, p := range plan {
		i := slices.IndexFunc(out, func(d quotaDelta) bool { return d.class == p.req.FareClass && d.n == p.bucket })
		if i < 0 {
			out = append(out, quotaDelta{class: p.req.FareClass, n: p.bucket})
			i = len(out) - 1
		}
		out[i].held += p.req.Units()
	}
	slices.SortFunc(out, func(a, b quotaDelta) int {
		return cmp.Or(cmp.Compare(a.class, b.class), cmp.Compare(a.n, b.n))
	})
	return out
}

// bucketsIncrement is the statement that adds deltas to their buckets'
// held counts where they still fit, locking the rows in class and bucket
// order first; a bucket without the room is left unchanged, so the
// statement's row count tells whether every delta fitted.
func bucketsIncrement(flightID int64, deltas []quotaDelta) (string, []any) {
	classes := make([]string, len(deltas))
	ns := make([]int16, len(deltas))
	helds := make([]int, len(deltas))
	for i, d := range deltas {
		classes[i], ns[i], helds[i] = d.class, d.n, d.held
	}
	return `WITH locked AS (
			SELECT fb.fare_class, fb.bucket FROM fare_bucket fb
			WHERE fb.flight_id = $1 AND (fb.fare_class, fb.bucket) IN (SELECT * FROM unnest($2::text[], $3::smallint[]))
			ORDER BY fb.fare_class, fb.bucket FOR UPDATE)
		UPDATE fare_bucket fb SET held = fb.held + u.held
		FROM locked l, unnest($2::text[], $3::smallint[], $4::int[]) AS u(fare_class, bucket, held)
		WHERE fb.flight_id = $1 AND fb.fare_class = l.fare_class AND fb.bucket = l.bucket
		  AND u.fare_class = l.fare_class AND u.bucket = l.bucket AND fb.sold + fb.held + u.held <= fb.quota`,
		[]any{flightID, classes, ns, helds}
}
