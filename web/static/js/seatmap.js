// The seat map: an SVG drawn from the seat list, rows down and seat
// letters across with aisles, each fare class in its own colour. Every
// seat is a keyboard-reachable checkbox (arrow keys move, Space or Enter
// choose) with data-seat and data-status hooks.

const NS = 'http://www.w3.org/2000/svg';
const SEAT = 30, GAP = 6, AISLE = 22, LABEL = 26, TOP = 22, CLASS_GAP = 12;
export const CLASS_COLOURS = { FIRST: '#8a3b12', BUSINESS: '#6a2c91', PREMIUM: '#0d6e6e', ECONOMY: '#1d4e89' };
const FALLBACK = ['#7a4f01', '#2f5d1e', '#5a3d8a'];

export function classColour(cls, i = 0) {
  return CLASS_COLOURS[cls] || FALLBACK[i % FALLBACK.length];
}

function parse(no) {
  const m = /^(\d+)([A-Z])$/.exec(no);
  return { row: Number(m[1]), letter: m[2] };
}

function el(tag, attrs) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

// columns places the letters across, with one aisle in the middle of a
// narrow cabin and two in a wide one.
function columns(letters) {
  const n = letters.length;
  const aisles = n > 6 ? [Math.ceil(n / 3), Math.ceil((2 * n) / 3)] : [Math.ceil(n / 2)];
  const x = new Map();
  let pos = LABEL;
  letters.forEach((l, i) => {
    if (aisles.includes(i)) pos += AISLE;
    x.set(l, pos);
    pos += SEAT + GAP;
  });
  return { x, width: pos };
}

export class SeatMap {
  // onToggle(seatNo) is called when a person chooses or drops a seat.
  constructor({ onToggle, classNames }) {
    this.onToggle = onToggle;
    this.classNames = classNames || {};
    this.svg = null;
    this.seats = new Map(); // seatNo → {g, fareClass, status}
    this.selected = new Set();
    this.fareClass = '';
    // readOnly shows the seats without letting any be chosen (a flight
    // that has departed).
    this.readOnly = false;
    // closed holds the fare classes that are sold out: their empty seats
    // cannot be chosen (data-status stays the API's AVAILABLE).
    this.closed = new Set();
  }

  // build draws the map for seats (once); update restyles it.
  build(seats) {
    const letters = [...new Set(seats.map((s) => parse(s.seatNo).letter))].sort();
    const rows = [...new Set(seats.map((s) => parse(s.seatNo).row))].sort((a, b) => a - b);
    const { x, width } = columns(letters);
    const classOfRow = new Map(seats.map((s) => [parse(s.seatNo).row, s.fareClass]));
    const y = new Map();
    let pos = TOP;
    let prev = '';
    for (const r of rows) {
      if (prev && classOfRow.get(r) !== prev) pos += CLASS_GAP;
      prev = classOfRow.get(r);
      y.set(r, pos);
      pos += SEAT + GAP;
    }
    const svg = el('svg', { viewBox: `0 0 ${width} ${pos}`, class: 'seatmap', role: 'group', 'aria-label': `Seat map: ${rows.length} rows, seats ${letters.join(' ')}` });
    const title = el('title', {});
    title.textContent = 'Seat map';
    svg.append(title);
    for (const l of letters) {
      const t = el('text', { x: x.get(l) + SEAT / 2, y: 14, 'text-anchor': 'middle', class: 'rowlabel', 'aria-hidden': 'true' });
      t.textContent = l;
      svg.append(t);
    }
    for (const r of rows) {
      const t = el('text', { x: 4, y: y.get(r) + SEAT / 2 + 4, class: 'rowlabel', 'aria-hidden': 'true' });
      t.textContent = r;
      svg.append(t);
    }
    const classes = [...new Set(seats.map((s) => s.fareClass))];
    const sorted = [...seats].sort((a, b) => {
      const pa = parse(a.seatNo), pb = parse(b.seatNo);
      return pa.row - pb.row || pa.letter.localeCompare(pb.letter);
    });
    for (const s of sorted) {
      const { row, letter } = parse(s.seatNo);
      const g = el('g', { class: 'seat', 'data-seat': s.seatNo, role: 'checkbox', tabindex: '-1' });
      const rect = el('rect', { x: x.get(letter), y: y.get(row), width: SEAT, height: SEAT, rx: 6, fill: classColour(s.fareClass, classes.indexOf(s.fareClass)) });
      const label = el('text', { x: x.get(letter) + SEAT / 2, y: y.get(row) + SEAT / 2 + 4, 'text-anchor': 'middle', 'aria-hidden': 'true' });
      label.textContent = s.seatNo;
      // The focus ring: a white gap and a dark ring around the seat, shown
      // only on focus (app.css), the same whatever the seat's colour, so a
      // focused seat differs from an unfocused one in every state. It
      // stays within the gap between seats.
      const ring = (d, cls) => el('rect', { x: x.get(letter) - d, y: y.get(row) - d, width: SEAT + 2 * d, height: SEAT + 2 * d, rx: 6 + d, class: cls, 'aria-hidden': 'true' });
      g.append(rect, label, ring(2, 'ring-gap'), ring(4, 'ring'));
      g.addEventListener('click', () => this.choose(s.seatNo));
      g.addEventListener('keydown', (e) => this.key(e, s.seatNo));
      svg.append(g);
      this.seats.set(s.seatNo, { g, fareClass: s.fareClass, status: s.status, row, letter });
    }
    this.grid = { rows, letters };
    this.svg = svg;
    this.update(seats);
    return svg;
  }

  // update applies fresh statuses. It returns the selected seats that
  // someone else took meanwhile (they are dropped from the selection).
  update(seats) {
    const lost = [];
    for (const s of seats) {
      const seat = this.seats.get(s.seatNo);
      if (!seat) continue;
      seat.status = s.status;
      if (s.status !== 'AVAILABLE' && this.selected.delete(s.seatNo)) lost.push(s.seatNo);
    }
    this.restyle();
    return lost;
  }

  // setClosed marks the fare classes that are sold out; a selected seat of
  // one is dropped from the selection (and returned).
  setClosed(classes) {
    this.closed = new Set(classes);
    const lost = [];
    for (const no of [...this.selected]) {
      if (this.closed.has(this.seats.get(no).fareClass) && this.selected.delete(no)) lost.push(no);
    }
    this.restyle();
    return lost;
  }

  setClass(fareClass) {
    this.fareClass = fareClass;
    for (const no of [...this.selected]) {
      if (this.seats.get(no).fareClass !== fareClass) this.selected.delete(no);
    }
    this.restyle();
  }

  restyle() {
    let tabbable = null;
    for (const [no, s] of this.seats) {
      const sel = this.selected.has(no);
      const shown = sel ? 'SELECTED' : s.status;
      s.g.dataset.status = shown;
      s.g.setAttribute('aria-checked', String(sel));
      const closed = this.closed.has(s.fareClass);
      const free = s.status === 'AVAILABLE' && !this.readOnly && !closed;
      if (free) s.g.removeAttribute('aria-disabled');
      else s.g.setAttribute('aria-disabled', 'true');
      // A sold-out class's empty seats, and every seat of a read-only map
      // (a departed flight), are pale like another class's: not to be chosen.
      s.g.classList.toggle('other-class', (!!this.fareClass && s.fareClass !== this.fareClass) || closed || this.readOnly);
      s.g.classList.toggle('sold-out', closed);
      const cls = this.classNames[s.fareClass] || s.fareClass.toLowerCase();
      // The map does not know whose holds are whose (the caller's own
      // included): a held seat is just held.
      // A read-only map (a departed flight) has empty seats, not
      // available ones: nothing is for sale. data-status stays the API's.
      const words = { AVAILABLE: this.readOnly ? 'not for sale' : closed ? 'not available: class sold out' : 'available', HELD: 'held', SOLD: 'sold', SELECTED: 'selected' }[shown];
      s.g.setAttribute('aria-label', `Seat ${no}, ${cls}, ${words}`);
      if (s.g.getAttribute('tabindex') === '0') tabbable = s.g;
    }
    if (!tabbable) {
      const first = [...this.seats.values()].find((s) => s.status === 'AVAILABLE' && !this.closed.has(s.fareClass) && (!this.fareClass || s.fareClass === this.fareClass))
        || this.seats.values().next().value;
      if (first) first.g.setAttribute('tabindex', '0');
    }
  }

  choose(no) {
    const s = this.seats.get(no);
    if (!s || s.status !== 'AVAILABLE' || this.readOnly || this.closed.has(s.fareClass)) return;
    this.focus(no);
    this.onToggle(no, s.fareClass);
  }

  focus(no) {
    for (const s of this.seats.values()) s.g.setAttribute('tabindex', '-1');
    const s = this.seats.get(no);
    s.g.setAttribute('tabindex', '0');
    s.g.focus();
  }

  key(e, no) {
    const s = this.seats.get(no);
    const { rows, letters } = this.grid;
    let r = rows.indexOf(s.row), l = letters.indexOf(s.letter);
    const step = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] }[e.key];
    if (e.key === ' ' || e.key === 'Enter') {
      e.preventDefault();
      this.choose(no);
      return;
    }
    if (!step) return;
    e.preventDefault();
    // Walk in that direction to the next seat that exists.
    for (;;) {
      r += step[0];
      l += step[1];
      if (r < 0 || r >= rows.length || l < 0 || l >= letters.length) return;
      const next = `${rows[r]}${letters[l]}`;
      if (this.seats.has(next)) {
        this.focus(next);
        return;
      }
    }
  }
}
