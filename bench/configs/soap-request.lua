-- Scenario 7 (SOAP validation) and its plain-proxy baseline: POST the createPerson SOAP 1.1
-- request of person-service.wsdl.
-- Used by bench/run.sh as: wrk -s bench/configs/soap-request.lua http://127.0.0.1:PORT/person-service
wrk.method = "POST"
wrk.headers["Content-Type"] = "text/xml; charset=utf-8"
wrk.headers["SOAPAction"] = '"https://turnpike.example/person/createPerson"'
wrk.body = '<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body><p:createPerson xmlns:p="https://turnpike.example/person"><person><firstName>Jane</firstName><lastName>Doe</lastName><email>jane.doe@example.com</email><phone>+49228123456</phone><birthDate>1990-04-01</birthDate><gender>FEMALE</gender><nationality>DE</nationality><company>Example GmbH</company><height>172</height><newsletter>true</newsletter><hobby>chess</hobby><hobby>hiking</hobby><hobby>cooking</hobby><address><street>Hauptstrasse</street><houseNumber>12a</houseNumber><postalCode>53111</postalCode><city>Bonn</city><state>NRW</state><country>Germany</country><type>home</type></address></person></p:createPerson></soapenv:Body></soapenv:Envelope>'
