// sse.js: an incremental parser of Server-Sent Events (text/event-stream).
//
// feed() takes text as it arrives, in pieces cut anywhere (even inside a line or between the
// CR and LF of a line end), and returns the data of every event completed by it. Only the
// `data` field matters to the chat API: comments (keep-alives) and other fields are skipped.

export class SseParser {
  constructor() {
    this.line = '';      // the line being read
    this.data = [];      // data lines of the event being read
    this.skipLf = false; // the previous piece ended with CR: a leading LF belongs to it
  }

  // Returns the data strings (lines joined by "\n") of the events this piece completes.
  feed(text) {
    const events = [];
    let i = 0;
    if (this.skipLf && text.startsWith('\n')) i = 1;
    this.skipLf = false;
    while (i < text.length) {
      const cr = text.indexOf('\r', i);
      const lf = text.indexOf('\n', i);
      let end = cr < 0 ? lf : lf < 0 ? cr : Math.min(cr, lf);
      if (end < 0) {
        this.line += text.slice(i);
        break;
      }
      this.line += text.slice(i, end);
      if (text[end] === '\r') {
        if (end + 1 === text.length) this.skipLf = true;
        else if (text[end + 1] === '\n') end++;
      }
      i = end + 1;
      this.#endLine(events);
    }
    return events;
  }

  #endLine(events) {
    const line = this.line;
    this.line = '';
    if (line === '') {
      if (this.data.length) events.push(this.data.join('\n'));
      this.data = [];
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
  }
}
