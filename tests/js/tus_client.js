// Drives tus-js-client (the npm package, pinned in package-lock.json) against Lethe for tests/e2e/test_tus_clients.py.
// One argument: a JSON object {mode, endpoint, token, path, chunkSize, uploadUrl, stopAt, metadata}.
//   mode "upload":    upload the file at `path` (resuming `uploadUrl` when given); print {"url", "offsetAtStart"}.
//   mode "stop":      upload until at least `stopAt` bytes were accepted, then abort (no termination); print {"url"}.
//   mode "terminate": terminate `uploadUrl`; print {"terminated": true}.
// Errors are printed as {"error": message, "status": code} with exit code 1.
'use strict'

const fs = require('fs')
const tus = require('tus-js-client')

const config = JSON.parse(process.argv[2])
const headers = { Authorization: `Bearer ${config.token}` }

function done (result) {
  process.stdout.write(JSON.stringify(result) + '\n')
  process.exit(0)
}

function failed (error) {
  const status = error.originalResponse ? error.originalResponse.getStatus() : null
  process.stdout.write(JSON.stringify({ error: String(error.message || error), status }) + '\n')
  process.exit(1)
}

if (config.mode === 'terminate') {
  tus.Upload.terminate(config.uploadUrl, { headers, retryDelays: [] }).then(() => done({ terminated: true }), failed)
} else {
  const data = fs.readFileSync(config.path)
  let offsetAtStart = null
  const upload = new tus.Upload(data, {
    endpoint: config.endpoint,
    uploadUrl: config.uploadUrl || null,
    headers,
    chunkSize: config.chunkSize || Infinity,
    parallelUploads: 1,
    retryDelays: [0, 200, 500],
    storeFingerprintForResuming: false,
    metadata: config.metadata,
    onChunkComplete (chunkSize, bytesAccepted) {
      if (offsetAtStart === null) offsetAtStart = bytesAccepted - chunkSize
      if (config.mode === 'stop' && bytesAccepted >= config.stopAt) {
        upload.abort(false).then(() => done({ url: upload.url, accepted: bytesAccepted }), failed)
      }
    },
    onSuccess () { done({ url: upload.url, offsetAtStart }) },
    onError: failed
  })
  upload.start()
}
