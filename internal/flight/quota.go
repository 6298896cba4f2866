package flight

import (
	"context"
	"fmt"

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

// soldOut is the error of a hold of n units that class of flightID lacks.
func soldOut(flightID int64, class string, n int) error {
	if n == 1 {
		return fault.New(fault.SoldOut, "fare class %s of flight %d is sold out", class, flightID)
	}
	return fault.New(fault.SoldOut, "fare class %s of flight %d has fewer than %d seats left", class, flightID, n)
}

// lockBucketsSQL locks every bucket of the classes $2 of flight $1, in
// class and bucket order (scanBuckets reads its rows).
const lockBucketsSQL = `SELECT fare_class, bucket, quota, sold, held FROM fare_bucket
	WHERE flight_id = $1 AND fare_class = ANY($2) ORDER BY fare_class, bucket FOR UPDATE`

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
