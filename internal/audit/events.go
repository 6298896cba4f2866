package audit

import "github.com/jackc/pgx/v5/pgtype"

// i6 checks that every state change wrote its event and that the tickets
// consumer's effect happened exactly once:
//
//   - a booking at version v has exactly v booking.* events, one of each
//     version, and the newest is the event of its current status; for
//     bookings older than the event retention only what retention keeps is
//     checked (its newest event, while that is young enough); an extended
//     hold's newest event is booking.extended, a seated quantity booking's
//     booking.seats_assigned;
//   - a flight booking whose current version the tickets consumer has
//     processed has one issued ticket per seat or unit if CONFIRMED, none
//     otherwise, and never more tickets than units (none re-issued);
//   - a ticket's seat is one of its booking's seats;
//   - with Options.ConsumerLag set, no flight booking change waits longer
//     than that for the tickets consumer.
var i6 = check{id: "I6", name: "every state change has its event; tickets issued = confirmed flight seats/units", args: eventArgs, query: `
	WITH ev AS (
		SELECT booking_id, count(*) AS n, count(DISTINCT (payload->>'version')::int) AS versions,
			max((payload->>'version')::int) AS newest
		FROM outbox WHERE type LIKE 'booking.%' GROUP BY booking_id)
	SELECT format('booking %s is at version %s but has %s booking events (%s versions, newest %s)',
		b.id, b.version, coalesce(ev.n, 0), coalesce(ev.versions, 0), coalesce(ev.newest::text, 'none'))
	FROM booking b LEFT JOIN ev ON ev.booking_id = b.id
	WHERE b.created_at >= $1 AND (ev.n IS NULL OR ev.n <> b.version OR ev.versions <> b.version OR ev.newest <> b.version)
	UNION ALL
	SELECT format('booking %s is %s at version %s but has no booking.%s event of that version', b.id, b.status, b.version, lower(b.status))
	FROM booking b
	WHERE b.updated_at >= $1 AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.booking_id = b.id
		AND (o.type = 'booking.' || lower(b.status) OR (b.status = 'HELD' AND o.type = 'booking.extended')
			OR (b.status IN ('HELD', 'CONFIRMED') AND o.type = 'booking.seats_assigned'))
		AND (o.payload->>'version')::int = b.version)
	UNION ALL
	SELECT format('flight booking %s is %s with %s units but has %s issued tickets (%s in all)',
		b.id, b.status, b.quantity, coalesce(t.issued, 0), coalesce(t.total, 0))
	FROM booking b JOIN ticket_booking tb ON tb.booking_id = b.id AND tb.version = b.version
	LEFT JOIN (SELECT booking_id, count(*) FILTER (WHERE status = 'ISSUED') AS issued, count(*) AS total
	           FROM ticket GROUP BY booking_id) t ON t.booking_id = b.id
	WHERE b.kind = 'flight' AND (coalesce(t.issued, 0) <> CASE WHEN b.status = 'CONFIRMED' THEN b.quantity ELSE 0 END
		OR coalesce(t.total, 0) > b.quantity)
	UNION ALL
	SELECT format('ticket %s is for seat %s of booking %s, which does not list it', t.number, t.seat_no, b.id)
	FROM ticket t JOIN booking b ON b.id = t.booking_id
	WHERE b.kind <> 'flight' OR (t.seat_no IS NOT NULL AND NOT (t.seat_no = ANY (coalesce(b.seats, '{}'))))
	UNION ALL
	SELECT format('the tickets consumer has not processed version %s of flight booking %s, changed at %s',
		b.version, b.id, b.updated_at)
	FROM booking b LEFT JOIN ticket_booking tb ON tb.booking_id = b.id
	WHERE $2::timestamptz IS NOT NULL AND b.kind = 'flight' AND coalesce(tb.version, 0) < b.version AND b.updated_at < $2`}

// eventArgs are I6's parameters: the oldest change whose events retention
// keeps (-infinity without retention), and the latest change the tickets
// consumer must have processed (NULL: not checked).
func eventArgs(o Options) []any {
	kept := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	if o.EventRetention > 0 {
		kept = pgtype.Timestamptz{Time: o.Now.Add(-o.EventRetention), Valid: true}
	}
	var lagCutoff pgtype.Timestamptz
	if o.ConsumerLag > 0 {
		lagCutoff = pgtype.Timestamptz{Time: o.Now.Add(-o.ConsumerLag), Valid: true}
	}
	return []any{kept, lagCutoff}
}
