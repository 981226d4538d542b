// A client for Lethe's HTTP API, for Node (18+) and browsers: the typed requests come from openapi-fetch over the
// types openapi-typescript generated from /openapi.json (src/schema.d.ts), uploads go by native parts (each part
// retried, an interrupted upload resumed from the parts the server has) or over tus (tus-js-client), and
// verifyWebhook reads every message type through the Standard Webhooks library.
import createFetchClient from 'openapi-fetch'

/** Each operationId of /openapi.json and the method that performs it (the tus operations are what tus-js-client
 * speaks for `upload(..., { transfer: 'tus' })`). A test fails when the server has one this lacks. */
export const OPERATIONS = {
  createUpload: 'beginUpload',
  getUpload: 'getUpload',
  putUploadPart: 'putPart',
  createUploadPartUrl: 'partUrl',
  completeUpload: 'completeUpload',
  abortUpload: 'abortUpload',
  tusOptions: 'upload',
  tusCreateUpload: 'upload',
  tusOptionsUpload: 'upload',
  tusGetOffset: 'upload',
  tusPatchUpload: 'upload',
  tusTerminateUpload: 'terminateTusUpload',
  listFiles: 'files',
  getFile: 'file',
  deleteFile: 'delete',
  batchDeleteFiles: 'deleteMany',
  getFileContent: 'download',
  getFileVariant: 'downloadVariant',
  createFileLink: 'link',
  restoreFile: 'restore',
  getLinkContent: 'downloadLink',
  putMessage: 'attach',
  deleteMessage: 'deleteMessage',
  listDrafts: 'drafts',
  putDraft: 'putDraft',
  deleteDraft: 'deleteDraft',
  listEvents: 'events',
  getReceipt: 'receipt',
  getAvatar: 'avatar',
  putAvatar: 'setAvatar',
  deleteAvatar: 'removeAvatar',
  getLogo: 'logo',
  putLogo: 'setLogo',
  deleteLogo: 'removeLogo',
  createErasure: 'erase',
  getErasure: 'erasure',
  listHolds: 'holds',
  placeHold: 'placeHold',
  getHold: 'hold',
  releaseHold: 'releaseHold',
  setQuota: 'setQuota',
  getUsage: 'usage',
  explainFile: 'explain'
}

/** Every webhook type Lethe sends: a file's lifecycle, then its end. */
export const WEBHOOK_TYPES = [
  'file.ready', 'file.blocked', 'file.failed', 'file.variants_ready',
  'file.purged', 'erasure.completed', 'hold.placed', 'hold.released'
]

/** A problem answer (application/problem+json): `status`, its stable `code`, the `reason` word, a `detail`. */
export class LetheError extends Error {
  constructor (status, problem) {
    super(`${status} ${problem.code ?? ''}${problem.reason ? ` (${problem.reason})` : ''}: ${problem.detail ?? problem.title ?? ''}`)
    this.name = 'LetheError'
    this.status = status
    this.problem = problem
    this.code = problem.code ?? `http_${status}`
    this.reason = problem.reason ?? null
    this.detail = problem.detail ?? null
  }

  /** An outage (503, 504), a rate limit (429) or the server's error (500); not 501 nor 502 (content_corrupt). */
  get retryable () {
    return [429, 500, 503, 504].includes(this.status)
  }
}

/** A native upload cut off after its retries: `resumeUpload(fileId, data)` sends what the server lacks. */
export class UploadInterrupted extends Error {
  constructor (fileId, cause) {
    super(`upload ${fileId} interrupted: ${cause}`)
    this.name = 'UploadInterrupted'
    this.fileId = fileId
    this.cause = cause
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function sha256Hex (bytes) {
  const digest = await globalThis.crypto.subtle.digest('SHA-256', bytes)
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, '0')).join('')
}

async function bytesOf (data) {
  if (data instanceof Uint8Array) return data
  if (data instanceof ArrayBuffer) return new Uint8Array(data)
  if (typeof Blob !== 'undefined' && data instanceof Blob) return new Uint8Array(await data.arrayBuffer())
  if (typeof data === 'string') return new TextEncoder().encode(data)
  throw new TypeError('upload takes a Uint8Array, an ArrayBuffer, a Blob or a string')
}

export class Client {
  /**
   * @param {string} baseUrl where Lethe answers (`http://127.0.0.1:8080`); the API is under /api/v1
   * @param {string} token a bearer token
   * @param {{retries?: number, backoffMs?: number, fetch?: typeof fetch}} [options]
   */
  constructor (baseUrl, token, options = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, '')
    this.token = token
    this.retries = options.retries ?? 4
    this.backoffMs = options.backoffMs ?? 500
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis)
    this.headers = { Authorization: `Bearer ${token}` }
    /** The typed requests: `client.api.GET('/api/v1/files/{file_id}', ...)`, as openapi-fetch gives them. */
    this.api = createFetchClient({ baseUrl: this.baseUrl, headers: this.headers, fetch: (request) => this.fetch(request) })
  }

  // A GET or PUT is tried again after an outage (its repetition answers as the first would); a POST or DELETE
  // is sent once, since a retry after a lost answer would meet what the first did (a 404, a second link).
  async _call (method, path, options = {}, { retry = method === 'GET' || method === 'PUT' } = {}) {
    for (let attempt = 0; ; attempt++) {
      let answer
      try {
        answer = await this.api[method](path, { ...options, parseAs: options.parseAs ?? 'json' })
      } catch (error) {
        if (!retry || attempt >= this.retries) throw error
        await sleep(this.backoffMs * 2 ** attempt)
        continue
      }
      if (answer.response.ok) return answer.data
      const error = new LetheError(answer.response.status, answer.error ?? {})
      if (!retry || !error.retryable || attempt >= this.retries) throw error
      await sleep(this.backoffMs * 2 ** attempt)
    }
  }

  // -- uploads ---------------------------------------------------------------------------------------------

  /** Upload bytes (a Uint8Array, ArrayBuffer, Blob or string); the file as its completion left it.
   * `transfer`: 'parts' (native, each part retried) or 'tus' (tus-js-client). */
  async upload (data, { name = 'upload.bin', purpose = 'attachment', mimeType = 'application/octet-stream', transfer = 'parts' } = {}) {
    const bytes = await bytesOf(data)
    if (transfer === 'tus') return this._tus(bytes, name, purpose, mimeType)
    const view = await this.beginUpload({ name, size_bytes: bytes.length, mime_type: mimeType, purpose, sha256: await sha256Hex(bytes) })
    try {
      await this._sendParts(view.upload, bytes)
    } catch (error) {
      if (error instanceof LetheError && !error.retryable) throw error
      throw new UploadInterrupted(view.file.id, error)
    }
    return this.completeUpload(view.file.id)
  }

  /** Send the parts the server lacks of an interrupted upload (the same bytes), then complete it. */
  async resumeUpload (fileId, data) {
    const bytes = await bytesOf(data)
    const view = await this.getUpload(fileId)
    await this._sendParts(view.upload, bytes)
    return this.completeUpload(fileId)
  }

  async _sendParts (upload, bytes) {
    const have = new Set(upload.parts_received)
    for (let number = 1; number <= upload.part_count; number++) {
      if (have.has(number)) continue
      const start = (number - 1) * upload.part_size
      await this.putPart(upload.file_id, number, bytes.subarray(start, Math.min(start + upload.part_size, bytes.length)))
    }
  }

  beginUpload (body) {
    return this._call('POST', '/api/v1/uploads', { body })
  }

  getUpload (fileId) {
    return this._call('GET', '/api/v1/uploads/{file_id}', { params: { path: { file_id: fileId } } })
  }

  putPart (fileId, number, bytes) {
    return this._call('PUT', '/api/v1/uploads/{file_id}/parts/{part_number}', {
      params: { path: { file_id: fileId, part_number: number } },
      body: bytes,
      bodySerializer: (body) => body,
      headers: { 'Content-Type': 'application/octet-stream' }
    })
  }

  partUrl (fileId, number) {
    return this._call('POST', '/api/v1/uploads/{file_id}/parts/{part_number}/url', { params: { path: { file_id: fileId, part_number: number } } })
  }

  completeUpload (fileId) {
    return this._call('POST', '/api/v1/uploads/{file_id}/complete', { params: { path: { file_id: fileId } } })
  }

  abortUpload (fileId) {
    return this._call('DELETE', '/api/v1/uploads/{file_id}', { params: { path: { file_id: fileId } }, parseAs: 'text' })
  }

  async _tus (bytes, name, purpose, mimeType) {
    const tus = globalThis.tus ?? (await import('tus-js-client'))
    const source = typeof Blob !== 'undefined' && tus.isSupported && typeof window !== 'undefined' ? new Blob([bytes]) : Buffer.from(bytes)
    const url = await new Promise((resolve, reject) => {
      const upload = new tus.Upload(source, {
        endpoint: `${this.baseUrl}/api/v1/tus`,
        headers: this.headers,
        chunkSize: 8 * 1024 * 1024,
        retryDelays: [0, 500, 1000, 2000],
        metadata: { filename: name, filetype: mimeType, purpose },
        onError: reject,
        onSuccess: () => resolve(upload.url)
      })
      upload.start()
    })
    return this.file(url.replace(/\/+$/, '').split('/').pop())
  }

  terminateTusUpload (fileId) {
    return this._call('DELETE', '/api/v1/tus/{file_id}', { params: { path: { file_id: fileId } }, headers: { 'Tus-Resumable': '1.0.0' }, parseAs: 'text' })
  }

  /** The file once its scan settled it (prefer the `file.ready` webhook in an application). */
  async waitReady (fileId, { timeoutMs = 60000, pollMs = 200 } = {}) {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const found = await this.file(fileId)
      if (found.upload_state === 'failed' || found.scan_status !== 'pending') return found
      if (Date.now() > deadline) throw new Error(`file ${fileId} still pending`)
      await sleep(pollMs)
    }
  }

  // -- files -----------------------------------------------------------------------------------------------

  file (fileId) {
    return this._call('GET', '/api/v1/files/{file_id}', { params: { path: { file_id: fileId } } })
  }

  /** listFiles, every page, as an async iterator (newest first). */
  async * files ({ purpose, state, pageSize = 100 } = {}) {
    const query = { limit: pageSize }
    if (purpose) query.purpose = purpose
    if (state) query.state = state
    for (;;) {
      const page = await this._call('GET', '/api/v1/files', { params: { query } })
      yield * page.files
      if (!page.next) return
      query.after = page.next
    }
  }

  delete (fileId) {
    return this._call('DELETE', '/api/v1/files/{file_id}', { params: { path: { file_id: fileId } }, parseAs: 'text' })
  }

  async deleteMany (fileIds) {
    return (await this._call('POST', '/api/v1/files/batch-delete', { body: { ids: fileIds } })).results
  }

  restore (fileId) {
    return this._call('POST', '/api/v1/files/{file_id}/restore', { params: { path: { file_id: fileId } } })
  }

  /** getFileContent: the Response, its body a stream; `range: [first, last]` asks for those bytes (206), and
   * `etag` holds the answer to that version (412 if the file changed). */
  download (fileId, { range, etag } = {}) {
    return this._raw(`/api/v1/files/${fileId}/content`, { range, etag })
  }

  downloadVariant (fileId, name, { range } = {}) {
    return this._raw(`/api/v1/files/${fileId}/variants/${name}`, { range })
  }

  async _raw (path, { range, etag } = {}) {
    const headers = { ...this.headers }
    if (range) headers.Range = `bytes=${range[0]}-${range[1] ?? ''}`
    if (etag) headers['If-Match'] = etag
    // In Node a redirect to the store (file.s3.download redirect) is followed by hand, with the range alone: Lethe
    // checked the token and If-Match, and the store's own ETag is not Lethe's. A browser follows it itself.
    const manual = typeof window === 'undefined'
    let response = await this.fetch(new Request(this.baseUrl + path, { headers, redirect: manual ? 'manual' : 'follow' }))
    if (manual && response.status >= 300 && response.status < 400 && response.headers.get('location')) {
      await response.body?.cancel()
      response = await this.fetch(new Request(response.headers.get('location'), { headers: range ? { Range: headers.Range } : {} }))
    }
    if (!response.ok) throw new LetheError(response.status, await response.json().catch(() => ({})))
    if (range && response.status !== 206) {
      await response.body?.cancel()
      throw new LetheError(response.status, { code: 'range_ignored' })
    }
    return response
  }

  link (fileId, { disposition = 'attachment', ttl, variant } = {}) {
    const body = { disposition }
    if (ttl) body.ttl = ttl
    if (variant) body.variant = variant
    return this._call('POST', '/api/v1/files/{file_id}/links', { params: { path: { file_id: fileId } }, body })
  }

  /** getLinkContent: what a link serves, with no token. */
  async downloadLink (url) {
    const response = await this.fetch(new Request(url))
    if (!response.ok) throw new LetheError(response.status, await response.json().catch(() => ({})))
    return new Uint8Array(await response.arrayBuffer())
  }

  explain (fileId) {
    return this._call('GET', '/api/v1/files/{file_id}/explain', { params: { path: { file_id: fileId } } })
  }

  // -- attachments, drafts, events -------------------------------------------------------------------------

  attach (messageId, fileIds) {
    return this._call('PUT', '/api/v1/messages/{message_id}', { params: { path: { message_id: messageId } }, body: { file_ids: fileIds } })
  }

  deleteMessage (messageId) {
    return this._call('DELETE', '/api/v1/messages/{message_id}', { params: { path: { message_id: messageId } }, parseAs: 'text' })
  }

  async drafts () {
    return (await this._call('GET', '/api/v1/drafts')).drafts
  }

  putDraft (key, text = '', fileIds = []) {
    return this._call('PUT', '/api/v1/drafts/{key}', { params: { path: { key } }, body: { text, file_ids: fileIds } })
  }

  deleteDraft (key) {
    return this._call('DELETE', '/api/v1/drafts/{key}', { params: { path: { key } }, parseAs: 'text' })
  }

  /** listEvents from `after` on, every page, as an async iterator. */
  async * events ({ after = 0, pageSize = 100 } = {}) {
    for (;;) {
      const page = await this._call('GET', '/api/v1/events', { params: { query: { after, limit: pageSize } } })
      yield * page.events
      if (!page.events.length || page.next_after === after) return
      after = page.next_after
    }
  }

  // -- avatars and the logo --------------------------------------------------------------------------------

  avatar (principalId) {
    return this._call('GET', '/api/v1/principals/{principal_id}/avatar', { params: { path: { principal_id: principalId } } })
  }

  setAvatar (principalId, fileId) {
    return this._call('PUT', '/api/v1/principals/{principal_id}/avatar', { params: { path: { principal_id: principalId } }, body: { file_id: fileId } })
  }

  removeAvatar (principalId) {
    return this._call('DELETE', '/api/v1/principals/{principal_id}/avatar', { params: { path: { principal_id: principalId } }, parseAs: 'text' })
  }

  logo () {
    return this._call('GET', '/api/v1/branding/logo')
  }

  setLogo (fileId) {
    return this._call('PUT', '/api/v1/branding/logo', { body: { file_id: fileId } })
  }

  removeLogo () {
    return this._call('DELETE', '/api/v1/branding/logo', { parseAs: 'text' })
  }

  // -- manage ----------------------------------------------------------------------------------------------

  receipt (fileId) {
    return this._call('GET', '/api/v1/receipts/{file_id}', { params: { path: { file_id: fileId } } })
  }

  erase (subjectId) {
    return this._call('POST', '/api/v1/erasures', { body: { subject_id: subjectId } })
  }

  erasure (erasureId) {
    return this._call('GET', '/api/v1/erasures/{erasure_id}', { params: { path: { erasure_id: erasureId } } })
  }

  placeHold (caseRef, { subjectId, fileId } = {}) {
    const body = { case_ref: caseRef }
    if (subjectId) body.subject_id = subjectId
    if (fileId) body.file_id = fileId
    return this._call('POST', '/api/v1/holds', { body })
  }

  hold (holdId) {
    return this._call('GET', '/api/v1/holds/{hold_id}', { params: { path: { hold_id: holdId } } })
  }

  async * holds ({ pageSize = 100 } = {}) {
    const query = { limit: pageSize }
    for (;;) {
      const page = await this._call('GET', '/api/v1/holds', { params: { query } })
      yield * page.holds
      if (!page.next_after) return
      query.after = page.next_after
    }
  }

  releaseHold (holdId) {
    return this._call('DELETE', '/api/v1/holds/{hold_id}', { params: { path: { hold_id: holdId } }, parseAs: 'text' })
  }

  setQuota (principalId, limits) {
    return this._call('PUT', '/api/v1/principals/{principal_id}/quota', { params: { path: { principal_id: principalId } }, body: limits })
  }

  usage (principalId) {
    return this._call('GET', '/api/v1/principals/{principal_id}/usage', { params: { path: { principal_id: principalId } } })
  }
}

/** Verify a webhook message with the endpoint's secret (`whsec_...`) and read it: `{ id, type, timestamp, data }`.
 * Throws when the signature does not verify, or for a type this client does not know. */
export async function verifyWebhook (payload, headers, secret) {
  const { Webhook } = await import('standardwebhooks')
  const lowered = Object.fromEntries(Object.entries(headers).map(([key, value]) => [key.toLowerCase(), value]))
  const body = typeof payload === 'string' ? payload : new TextDecoder().decode(payload)
  const message = new Webhook(secret).verify(body, lowered)
  if (!WEBHOOK_TYPES.includes(message.type)) throw new Error(`a webhook of a type this client does not know: ${message.type}`)
  return { id: lowered['webhook-id'], type: message.type, timestamp: new Date(message.timestamp), data: message.data }
}
