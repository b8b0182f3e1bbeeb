// A small terminal for the shell WebSocket: enough of a VT100/xterm to show a shell, its prompt, colours,
// line editing and full-screen programs' usual moves; keystrokes as a terminal sends them.

const PALETTE = [
  '#1d1f21', '#cc6666', '#8fbc5a', '#e0b050', '#6d9ccf', '#b294bb', '#6fb8b0', '#c5c8c6',
  '#666a6e', '#ff7b72', '#a6da7a', '#f0c674', '#81a2e0', '#c9a6d6', '#8abeb7', '#ffffff',
];
const SCROLLBACK = 2000;

function blank() {
  return { ch: ' ', fg: null, bg: null, bold: false, inverse: false };
}

function color256(n) {
  if (n < 16) return PALETTE[n];
  if (n < 232) {
    const v = [0, 95, 135, 175, 215, 255];
    const i = n - 16;
    return `rgb(${v[Math.floor(i / 36)]},${v[Math.floor(i / 6) % 6]},${v[i % 6]})`;
  }
  const g = 8 + (n - 232) * 10;
  return `rgb(${g},${g},${g})`;
}

export class Terminal {
  constructor(node, rows = 24, cols = 80) {
    this.node = node;
    this.onData = () => {};
    this.decoder = new TextDecoder();
    this.history = [];
    this.resize(rows, cols);
    this.state = 'text';
    this.seq = '';
    this.style = blank();
    this.saved = { x: 0, y: 0 };
    this.pending = false;
    node.tabIndex = 0;
    node.addEventListener('keydown', (e) => this.key(e));
    node.addEventListener('paste', (e) => {
      e.preventDefault();
      this.onData(e.clipboardData.getData('text').replace(/\r?\n/g, '\r'));
    });
  }

  resize(rows, cols) {
    this.rows = rows;
    this.cols = cols;
    this.screen = Array.from({ length: rows }, () => this.line());
    this.x = 0;
    this.y = 0;
    this.top = 0;
    this.bottom = rows - 1;
    this.render();
  }

  line() {
    return Array.from({ length: this.cols }, blank);
  }

  /** What the terminal shows now, as text (its scrollback first). */
  text() {
    const show = (row) => row.map((c) => c.ch).join('').replace(/\s+$/, '');
    return [...this.history, ...this.screen].map(show).join('\n');
  }

  write(bytes) {
    const text = typeof bytes === 'string' ? bytes : this.decoder.decode(bytes, { stream: true });
    for (const ch of text) this.feed(ch);
    this.schedule();
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.render();
    });
  }

  feed(ch) {
    const code = ch.codePointAt(0);
    if (this.state === 'esc') return this.escape(ch);
    if (this.state === 'csi') {
      if (code >= 0x40 && code <= 0x7e) {
        this.state = 'text';
        this.csi(this.seq, ch);
      } else {
        this.seq += ch;
      }
      return undefined;
    }
    if (this.state === 'osc') {
      if (ch === '\x07' || (ch === '\\' && this.seq.endsWith('\x1b'))) this.state = 'text';
      else this.seq += ch;
      return undefined;
    }
    if (this.state === 'charset') {
      this.state = 'text';
      return undefined;
    }
    switch (ch) {
      case '\x1b':
        this.state = 'esc';
        return undefined;
      case '\r':
        this.x = 0;
        return undefined;
      case '\n':
      case '\x0b':
      case '\x0c':
        return this.lineFeed();
      case '\b':
        this.x = Math.max(0, this.x - 1);
        return undefined;
      case '\t':
        this.x = Math.min(this.cols - 1, (Math.floor(this.x / 8) + 1) * 8);
        return undefined;
      case '\x07':
      case '\x00':
        return undefined;
      default:
        if (code < 0x20) return undefined;
        return this.put(ch);
    }
  }

  put(ch) {
    if (this.x >= this.cols) {
      this.x = 0;
      this.lineFeed();
    }
    this.screen[this.y][this.x] = { ...this.style, ch };
    this.x += 1;
  }

  lineFeed() {
    if (this.y === this.bottom) this.scrollUp(1);
    else this.y = Math.min(this.rows - 1, this.y + 1);
  }

  scrollUp(n) {
    for (let i = 0; i < n; i++) {
      const [gone] = this.screen.splice(this.top, 1);
      if (this.top === 0 && !this.alternate) {
        this.history.push(gone);
        if (this.history.length > SCROLLBACK) this.history.shift();
      }
      this.screen.splice(this.bottom, 0, this.line());
    }
  }

  scrollDown(n) {
    for (let i = 0; i < n; i++) {
      this.screen.splice(this.bottom, 1);
      this.screen.splice(this.top, 0, this.line());
    }
  }

  escape(ch) {
    this.state = 'text';
    switch (ch) {
      case '[':
        this.state = 'csi';
        this.seq = '';
        break;
      case ']':
        this.state = 'osc';
        this.seq = '';
        break;
      case '(':
      case ')':
        this.state = 'charset';
        break;
      case '7':
        this.saved = { x: this.x, y: this.y };
        break;
      case '8':
        ({ x: this.x, y: this.y } = this.saved);
        break;
      case 'M':
        if (this.y === this.top) this.scrollDown(1);
        else this.y = Math.max(0, this.y - 1);
        break;
      case 'c':
        this.resize(this.rows, this.cols);
        break;
      default:
        break;
    }
  }

  erase(row, from, to) {
    for (let i = from; i < to; i++) this.screen[row][i] = { ...blank(), bg: this.style.bg };
  }

  csi(seq, final) {
    const priv = seq.startsWith('?');
    const args = (priv ? seq.slice(1) : seq).split(';').map((s) => parseInt(s, 10));
    const n = (i = 0, d = 1) => (Number.isNaN(args[i]) || args[i] === undefined || args[i] === 0 ? d : args[i]);
    const clampY = (y) => Math.max(0, Math.min(this.rows - 1, y));
    const clampX = (x) => Math.max(0, Math.min(this.cols - 1, x));
    switch (final) {
      case 'A': this.y = clampY(this.y - n()); break;
      case 'B': this.y = clampY(this.y + n()); break;
      case 'C': this.x = clampX(this.x + n()); break;
      case 'D': this.x = clampX(Math.min(this.x, this.cols - 1) - n()); break;
      case 'E': this.y = clampY(this.y + n()); this.x = 0; break;
      case 'F': this.y = clampY(this.y - n()); this.x = 0; break;
      case 'G': this.x = clampX(n() - 1); break;
      case 'd': this.y = clampY(n() - 1); break;
      case 'H':
      case 'f':
        this.y = clampY(n(0) - 1);
        this.x = clampX(n(1) - 1);
        break;
      case 'J': {
        const mode = Number.isNaN(args[0]) ? 0 : args[0];
        if (mode === 0) {
          this.erase(this.y, Math.min(this.x, this.cols), this.cols);
          for (let r = this.y + 1; r < this.rows; r++) this.erase(r, 0, this.cols);
        } else if (mode === 1) {
          for (let r = 0; r < this.y; r++) this.erase(r, 0, this.cols);
          this.erase(this.y, 0, Math.min(this.x + 1, this.cols));
        } else {
          for (let r = 0; r < this.rows; r++) this.erase(r, 0, this.cols);
        }
        break;
      }
      case 'K': {
        const mode = Number.isNaN(args[0]) ? 0 : args[0];
        if (mode === 0) this.erase(this.y, Math.min(this.x, this.cols), this.cols);
        else if (mode === 1) this.erase(this.y, 0, Math.min(this.x + 1, this.cols));
        else this.erase(this.y, 0, this.cols);
        break;
      }
      case 'X': this.erase(this.y, this.x, Math.min(this.cols, this.x + n())); break;
      case 'P': {
        const row = this.screen[this.y];
        row.splice(this.x, n());
        while (row.length < this.cols) row.push(blank());
        break;
      }
      case '@': {
        const row = this.screen[this.y];
        row.splice(this.x, 0, ...Array.from({ length: n() }, blank));
        row.length = this.cols;
        break;
      }
      case 'L': if (this.y >= this.top && this.y <= this.bottom) this.insertLines(n()); break;
      case 'M': if (this.y >= this.top && this.y <= this.bottom) this.deleteLines(n()); break;
      case 'S': this.scrollUp(n()); break;
      case 'T': this.scrollDown(n()); break;
      case 'r':
        this.top = clampY(n(0) - 1);
        this.bottom = clampY(Number.isNaN(args[1]) || args[1] === undefined ? this.rows - 1 : args[1] - 1);
        this.x = 0;
        this.y = 0;
        break;
      case 's': this.saved = { x: this.x, y: this.y }; break;
      case 'u': ({ x: this.x, y: this.y } = this.saved); break;
      case 'm': this.sgr(args); break;
      case 'h':
      case 'l':
        if (priv && args.includes(1049)) this.alternateScreen(final === 'h');
        if (priv && args.includes(25)) this.hidden = final === 'l';
        break;
      default:
        break;
    }
  }

  insertLines(n) {
    for (let i = 0; i < n; i++) {
      this.screen.splice(this.bottom, 1);
      this.screen.splice(this.y, 0, this.line());
    }
  }

  deleteLines(n) {
    for (let i = 0; i < n; i++) {
      this.screen.splice(this.y, 1);
      this.screen.splice(this.bottom, 0, this.line());
    }
  }

  alternateScreen(on) {
    if (on && !this.alternate) {
      this.alternate = { screen: this.screen, x: this.x, y: this.y };
      this.screen = Array.from({ length: this.rows }, () => this.line());
    } else if (!on && this.alternate) {
      ({ screen: this.screen, x: this.x, y: this.y } = this.alternate);
      this.alternate = null;
    }
  }

  sgr(args) {
    if (args.length === 0) args = [0];
    for (let i = 0; i < args.length; i++) {
      const a = Number.isNaN(args[i]) ? 0 : args[i];
      if (a === 0) this.style = blank();
      else if (a === 1) this.style.bold = true;
      else if (a === 22) this.style.bold = false;
      else if (a === 7) this.style.inverse = true;
      else if (a === 27) this.style.inverse = false;
      else if (a >= 30 && a <= 37) this.style.fg = PALETTE[a - 30];
      else if (a >= 90 && a <= 97) this.style.fg = PALETTE[a - 82];
      else if (a === 39) this.style.fg = null;
      else if (a >= 40 && a <= 47) this.style.bg = PALETTE[a - 40];
      else if (a >= 100 && a <= 107) this.style.bg = PALETTE[a - 92];
      else if (a === 49) this.style.bg = null;
      else if (a === 38 || a === 48) {
        let c = null;
        if (args[i + 1] === 5) {
          c = color256(args[i + 2] || 0);
          i += 2;
        } else if (args[i + 1] === 2) {
          c = `rgb(${args[i + 2] || 0},${args[i + 3] || 0},${args[i + 4] || 0})`;
          i += 4;
        }
        if (a === 38) this.style.fg = c;
        else this.style.bg = c;
      }
    }
  }

  render() {
    const rows = [...this.history.slice(-200), ...this.screen];
    const cursorRow = rows.length - this.rows + this.y;
    const frag = document.createDocumentFragment();
    rows.forEach((row, r) => {
      const line = document.createElement('div');
      line.className = 'tline';
      let run = null;
      let runKey = null;
      row.forEach((cell, c) => {
        const cursor = r === cursorRow && c === Math.min(this.x, this.cols - 1) && !this.hidden;
        const k = `${cell.fg}|${cell.bg}|${cell.bold}|${cell.inverse !== cursor}`;
        if (k !== runKey) {
          run = document.createElement('span');
          let [fg, bg] = [cell.fg, cell.bg];
          if (cell.inverse !== cursor) [fg, bg] = [bg || '#1d1f21', fg || '#c5c8c6'];
          if (fg) run.style.color = fg;
          if (bg) run.style.background = bg;
          if (cell.bold) run.style.fontWeight = 'bold';
          line.append(run);
          runKey = k;
        }
        run.textContent += cell.ch;
      });
      frag.append(line);
    });
    this.node.replaceChildren(frag);
    this.node.scrollTop = this.node.scrollHeight;
  }

  key(e) {
    const seqs = {
      Enter: '\r', Backspace: '\x7f', Tab: '\t', Escape: '\x1b',
      ArrowUp: '\x1b[A', ArrowDown: '\x1b[B', ArrowRight: '\x1b[C', ArrowLeft: '\x1b[D',
      Home: '\x1b[H', End: '\x1b[F', Delete: '\x1b[3~', PageUp: '\x1b[5~', PageDown: '\x1b[6~',
      Insert: '\x1b[2~',
    };
    let data = null;
    if (e.ctrlKey && !e.altKey && e.key.length === 1) {
      const c = e.key.toUpperCase().charCodeAt(0);
      if (c >= 64 && c <= 95) data = String.fromCharCode(c - 64);
      else if (e.key === ' ') data = '\x00';
    } else if (seqs[e.key]) {
      data = seqs[e.key];
    } else if (e.key.length === 1 && !e.metaKey) {
      data = e.altKey ? `\x1b${e.key}` : e.key;
    }
    if (data === null) return;
    // Copying a selection keeps the browser's ctrl-c when text is selected.
    if (e.ctrlKey && e.key === 'c' && String(window.getSelection())) return;
    e.preventDefault();
    this.onData(data);
  }
}
