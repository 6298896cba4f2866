package audit

// The money invariants (docs/invariants.md I4, I5) over the payment tables of
// migration 00004. A payment row is money the gateway reported received: it
// either confirmed its booking (outcome 'confirmed') or is owed back in
// full (outcome 'refund').
//
// A refund counts from the moment it is owed: the refund.requested event is
// written in the same transaction as the cancellation or the payment that
// owes it, and the refunds consumer turns it into a refund row later. So
// both checks hold at every commit, with or without a refunds consumer
// running; that refunds also complete at the gateway is the consumer's
// tests' business.

// refundsOwed lists every refund owed, per payment: the refund rows, and
// the refund.requested events not yet turned into one. An event names its
// charge (money that confirmed nothing) or else means the charge that
// confirmed its booking (a cancellation). The refund is the event data's
// "refund" member (its top level is the booking), or the whole data in an
// event of an earlier release, as booking.RefundOf reads it.
const refundsOwed = `
	refunds_owed AS (
		SELECT r.payment_id, r.amount, r.currency FROM refund r
		UNION ALL
		SELECT p.id, (e.refund->>'amount')::bigint, e.refund->>'currency'
		FROM outbox o
		CROSS JOIN LATERAL (SELECT CASE WHEN jsonb_typeof(o.payload->'refund') = 'object'
			THEN o.payload->'refund' ELSE o.payload END AS refund) e
		JOIN payment p ON CASE WHEN e.refund ? 'providerTxnId' THEN p.provider_txn_id = e.refund->>'providerTxnId'
			ELSE p.booking_id = o.booking_id AND p.outcome = 'confirmed' END
		WHERE o.type = 'refund.requested' AND (e.refund->>'amount')::bigint > 0
		  AND NOT EXISTS (SELECT 1 FROM refund r WHERE r.event_id = o.event_id::text))`

// i4: a booking is confirmed only by a charge that fits it, and no money is
// left neither confirming nor refunded.
var i4 = check{
	id:   "I4",
	name: "a booking is confirmed only by a charge of its full amount received before its hold expired; every charge confirms exactly one booking or is refunded exactly once",
	args: none,
	query: `WITH` + refundsOwed + `
	SELECT format('booking %s is %s without a charge of %s %s received before its hold expired at %s',
		b.id, b.status, b.amount, b.currency, b.hold_expires_at)
	FROM booking b
	WHERE b.status IN ('CONFIRMED', 'ON_TRIP', 'COMPLETED')
	  AND NOT EXISTS (SELECT 1 FROM payment p WHERE p.booking_id = b.id AND p.outcome = 'confirmed'
		AND p.amount = b.amount AND p.currency = b.currency AND p.received_at < b.hold_expires_at)
	UNION ALL
	SELECT format('charge %s of %s %s confirmed booking %s, which is %s (%s %s, held until %s); received at %s',
		p.provider_txn_id, p.amount, p.currency, p.booking_id, coalesce(b.status, 'missing'),
		b.amount, b.currency, b.hold_expires_at, p.received_at)
	FROM payment p LEFT JOIN booking b ON b.id = p.booking_id
	WHERE p.outcome = 'confirmed' AND (b.id IS NULL
		OR b.status NOT IN ('CONFIRMED', 'ON_TRIP', 'COMPLETED', 'CANCELLED')
		OR b.cancel_reason = 'payment_failed'
		OR p.amount <> b.amount OR p.currency <> b.currency OR p.received_at >= b.hold_expires_at)
	UNION ALL
	SELECT format('charge %s of %s %s for booking %s did not confirm it (%s) and has %s refunds of %s in all, not one of the full amount',
		p.provider_txn_id, p.amount, p.currency, p.booking_id, p.reason, r.n, r.total)
	FROM payment p
	CROSS JOIN LATERAL (SELECT count(*) AS n, coalesce(sum(amount), 0) AS total FROM refunds_owed WHERE payment_id = p.id) r
	WHERE p.outcome = 'refund' AND p.amount > 0 AND (r.n <> 1 OR r.total <> p.amount)`,
}

// i5: per charge, what was received minus what is refunded is what berth
// keeps — the booking's amount while it stands, the cancellation fee once
// it is cancelled, nothing when it confirmed nothing. Summed, it is the
// ledger: charges − refunds = confirmed amounts + retained fees.
var i5 = check{
	id:   "I5",
	name: "money balances: charges − refunds = confirmed amounts + retained cancellation fees",
	args: none,
	query: `WITH` + refundsOwed + `
	SELECT format('charge %s of %s %s for booking %s (%s): %s refunded, so %s kept, but %s is due',
		p.provider_txn_id, p.amount, p.currency, p.booking_id, coalesce(b.status, 'missing'), r.total, p.amount - r.total, due.amount)
	FROM payment p
	LEFT JOIN booking b ON b.id = p.booking_id
	CROSS JOIN LATERAL (SELECT coalesce(sum(amount), 0) AS total FROM refunds_owed WHERE payment_id = p.id) r
	CROSS JOIN LATERAL (SELECT CASE
		WHEN p.outcome = 'refund' THEN 0
		WHEN b.status IN ('CONFIRMED', 'ON_TRIP', 'COMPLETED') THEN b.amount
		WHEN b.status = 'CANCELLED' THEN b.amount - coalesce(b.refund_amount, 0)
		ELSE 0 END AS amount) due
	WHERE p.amount - r.total <> due.amount
	UNION ALL
	SELECT format('a refund of %s %s is in another currency than its charge %s (%s)',
		o.amount, o.currency, p.provider_txn_id, p.currency)
	FROM refunds_owed o JOIN payment p ON p.id = o.payment_id
	WHERE o.currency <> p.currency`,
}
